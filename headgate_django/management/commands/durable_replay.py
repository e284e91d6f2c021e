"""``manage.py durable_replay FILE [FILE ...]``: replay exported durable histories against
the workflow code of this project and report nondeterminism (the safe-deploy check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from headgate_django import durable
from headgate_django.exceptions import DefinitionError, NondeterminismError


class Command(BaseCommand):
    help = "Replay exported durable histories (Manager.history() JSON) against the current code."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "files",
            nargs="+",
            metavar="FILE",
            type=Path,
            help="A history exported with Manager().history() or GET …/history (JSON).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        failed = 0
        for path in options["files"]:
            try:
                export = durable.replay(path.read_bytes())
            except OSError as exc:
                raise CommandError(f"{path}: {exc}") from exc
            except (NondeterminismError, DefinitionError) as exc:
                failed += 1
                self.stderr.write(f"FAIL {path}: {type(exc).__name__}: {exc}")
                continue
            self.stdout.write(
                f"ok   {path}: {export.name}@{export.version} ({len(export.events)} events)"
            )
        if failed:
            raise CommandError(f"{failed} of {len(options['files'])} history file(s) do not replay")

"""``manage.py rundemo``: workers plus the ASGI server on 127.0.0.1:8000 until Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run headgate workers and the ASGI server (console at /admin/) until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        signal.signal(signal.SIGTERM, _interrupt)  # stop the children on SIGTERM as on Ctrl-C
        manage = [sys.executable, sys.argv[0]]
        workers = subprocess.Popen([*manage, "runworkers", "--concurrency", "4"])
        server = subprocess.Popen([*manage, "runserver", options["addr"], "--noreload"])
        self.stdout.write(
            self.style.SUCCESS(f"Console: http://{options['addr']}/admin/  (Ctrl-C to stop)")
        )
        try:
            server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            for proc in (server, workers):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in (server, workers):
                proc.wait(timeout=40)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt

"""``manage.py rundemo``: workers plus the ASGI server until Ctrl-C.

The console and the API are served on ``--addr`` (127.0.0.1:8000). With the explicit
opt-in ``HEADGATE_DEMO_OPERATOR`` (``make demo`` sets it) the API is served a second time
on ``--operator-addr`` (127.0.0.1:8080), a loopback-only port whose callers are the demo
operator (``sampleproject/auth.py``), so that the workflow guide's curl commands, which
carry no credentials, run as written. Without the opt-in that port is not opened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
DEFAULT_OPERATOR_ADDR = "127.0.0.1:8080"


class Command(BaseCommand):
    help = "Run headgate workers and the ASGI server (console at /admin/) until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument(
            "--operator-addr",
            default=None,
            help="loopback address whose API callers act as the demo operator ('' for none; "
            f"default {DEFAULT_OPERATOR_ADDR} when HEADGATE_DEMO_OPERATOR is on)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        operator_addr = _operator_addr(options["operator_addr"])
        env = dict(os.environ)
        if operator_addr:
            host, _, port = operator_addr.rpartition(":")
            if host not in LOOPBACK_HOSTS or not port.isdigit():
                raise CommandError(
                    f"--operator-addr must be a loopback host:port, not {operator_addr!r}: "
                    "every caller on it acts as the demo operator"
                )
            env["DEMO_OPERATOR_PORT"] = port
        signal.signal(signal.SIGTERM, _interrupt)  # stop the children on SIGTERM as on Ctrl-C
        manage = [sys.executable, sys.argv[0]]
        servers = [options["addr"], *([operator_addr] if operator_addr else [])]
        children = [subprocess.Popen([*manage, "runworkers", "--concurrency", "4"], env=env)]
        children += [
            subprocess.Popen([*manage, "runserver", addr, "--noreload"], env=env)
            for addr in servers
        ]
        self.stdout.write(
            self.style.SUCCESS(f"Console: http://{options['addr']}/admin/  (Ctrl-C to stop)")
        )
        if operator_addr:
            self.stdout.write(
                f"API as the demo operator, no credentials: http://{operator_addr}/api/v1/"
            )
        try:
            children[1].wait()
        except KeyboardInterrupt:
            pass
        finally:
            for proc in children:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in children:
                proc.wait(timeout=40)


def _operator_addr(given: str | None) -> str:
    """The operator port's address, or '' for none; it needs the explicit opt-in."""
    enabled = bool(getattr(settings, "HEADGATE_DEMO_OPERATOR", False))
    if given is None:
        return DEFAULT_OPERATOR_ADDR if enabled else ""
    if given and not enabled:
        raise CommandError(
            "--operator-addr needs the opt-in HEADGATE_DEMO_OPERATOR (set the environment "
            "variable HEADGATE_DEMO_OPERATOR=1, as `make demo` does): every caller on that "
            "port acts as the demo operator"
        )
    return given


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt

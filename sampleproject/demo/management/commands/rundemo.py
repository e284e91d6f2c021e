"""``manage.py rundemo``: workers plus the ASGI server until Ctrl-C.

The console and the API are served on ``--addr`` (127.0.0.1:8000). With the explicit
opt-in ``HEADGATE_DEMO_OPERATOR`` (``make demo`` sets it) the API is served a second time
on ``--operator-addr`` (127.0.0.1:8080), a loopback-only port whose callers are the demo
operator (``sampleproject/auth.py``), so that the workflow guide's curl commands, which
carry no credentials, run as written. Without the opt-in that port is not opened.

A demo must not half-start: the ports are checked before anything else (``--seed``
creates the demo data only then), the servers must be listening before the worker starts
taking the demo's jobs, and any child that cannot start stops the rest with one clear line
and a non-zero exit.

One Ctrl-C drains: the children run in sessions of their own, so the terminal's SIGINT
reaches this process only, which sends each child one SIGTERM (the worker's drain; a second
signal would make it exit at once). Under ``make`` the terminal's Ctrl-C would also reach
``make``, which then reports an interrupt whatever its recipe did; so, when it runs in the
terminal's foreground, this command takes the foreground for its own process group while
it runs and gives it back as it exits.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
DEFAULT_OPERATOR_ADDR = "127.0.0.1:8080"
#: How long a server may take to listen before the demo gives up.
START_TIMEOUT = 60.0
#: The worker's drain window (SHUTDOWN_TIMEOUT, 25 s) and some.
STOP_TIMEOUT = 40.0
#: After a second Ctrl-C: how long the children get to exit before they are killed.
HURRY_TIMEOUT = 5.0


class Command(BaseCommand):
    help = "Run headgate workers and the ASGI server (console at /admin/) until Ctrl-C."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--addr", default="127.0.0.1:8000", help="Console and API (default 127.0.0.1:8000)."
        )
        parser.add_argument(
            "--operator-addr",
            default=None,
            help="loopback address whose API callers act as the demo operator ('' for none; "
            f"default {DEFAULT_OPERATOR_ADDR} when HEADGATE_DEMO_OPERATOR is on)",
        )
        parser.add_argument(
            "--seed",
            action="store_true",
            help="Create the admin user and the demo jobs (manage.py demo) once the ports "
            "are known to be free.",
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
        servers = [options["addr"], *([operator_addr] if operator_addr else [])]
        if operator_addr and _split(options["addr"]) == _split(operator_addr):
            raise CommandError(
                f"--addr {options['addr']} and --operator-addr {operator_addr} are one "
                "address: give each server its own port"
            )
        for option, addr in zip(("--addr", "--operator-addr"), servers, strict=False):
            _check_free(option, addr, {_split(other)[1] for other in servers if other != addr})
        if options["seed"]:
            call_command("demo", stdout=self.stdout, stderr=self.stderr)
        signal.signal(signal.SIGTERM, _interrupt)  # stop the children on SIGTERM as on Ctrl-C
        manage = [sys.executable, sys.argv[0]]
        children: list[subprocess.Popen[bytes]] = []
        with _terminal_foreground():
            try:
                for addr in servers:
                    children.append(_start([*manage, "runserver", addr, "--noreload"], env))
                for addr, proc in zip(servers, children, strict=True):
                    _wait_listening(addr, proc)
                children.append(_start([*manage, "runworkers", "--concurrency", "4"], env))
                self.stdout.write(
                    self.style.SUCCESS(f"Console: {_url(options['addr'])}/admin/  (Ctrl-C to stop)")
                )
                if operator_addr:
                    self.stdout.write(
                        f"API as the demo operator, no credentials: {_url(operator_addr)}/api/v1/"
                    )
                stopped = _wait_any(children)
                raise CommandError(
                    f"`manage.py {stopped.args[2]}` exited with status {stopped.returncode}; "
                    "stopping the demo"
                )
            except KeyboardInterrupt:
                self.stdout.write(
                    "Stopping: the worker drains, then the demo exits (Ctrl-C again: at once)."
                )
            finally:
                if not _stop(children):
                    self.stdout.write("Stopped at once: unfinished jobs go back to their queues.")


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


def _split(addr: str) -> tuple[str, int]:
    """``addr`` as runserver reads it: ``host:port``, or a port alone (on 127.0.0.1).

    Refused here, before anything starts, is what runserver would refuse (``:8000``) or
    could not be waited for (port 0, any free one), and a port no socket has.
    """
    host, colon, port = addr.rpartition(":")
    if not (port.isdigit() and 0 < int(port) < 65536) or (colon and not host):
        raise CommandError(f"{addr!r} is not a host:port address with a port from 1 to 65535")
    return host.strip("[]") or "127.0.0.1", int(port)


def _url(addr: str) -> str:
    """Where a browser finds ``addr`` (``8001`` alone is ``127.0.0.1:8001``, as runserver
    reads it)."""
    return f"http://{_join(*_split(addr))}"


def _join(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_free(option: str, addr: str, others: set[int]) -> None:
    """Refuse an address something already listens on, before anything starts.

    The way out names a port that is free now and is not the other server's (``others``),
    so that following it starts the demo rather than failing again on a port also taken.
    """
    host, port = _split(addr)
    try:
        _bind(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why, ports = "is in use: stop what listens there, or choose a free port", port + 1
        else:  # not an address of this host: a loopback one is
            why, host, ports = f"cannot be used ({exc}): choose another address", "127.0.0.1", port
        free = next(
            (p for p in range(ports, 65536) if p not in others and _bindable(host, p)), None
        )
        if free is None:
            raise CommandError(f"{addr} {why}") from None
        other = _join(host, free)
        variable = {"--addr": "DEMO_ADDR", "--operator-addr": "DEMO_OPERATOR_ADDR"}[option]
        raise CommandError(
            f"{addr} {why}: make demo {variable}={other} (rundemo {option} {other})"
        ) from None


def _bind(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def _bindable(host: str, port: int) -> bool:
    try:
        _bind(host, port)
    except OSError:
        return False
    return True


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A session of its own: the terminal's Ctrl-C reaches this command only, which then
    # signals each child exactly once.
    return subprocess.Popen(command, env=env, start_new_session=True)


def _wait_listening(addr: str, proc: subprocess.Popen[bytes]) -> None:
    host, port = _split(addr)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CommandError(f"the server for {addr} exited before it listened")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.1)
    raise CommandError(f"the server for {addr} did not listen within {START_TIMEOUT:g} s")


def _wait_any(children: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """The first child to exit, waiting for it."""
    while True:
        for proc in children:
            if proc.poll() is not None:
                return proc
        time.sleep(0.2)


def _stop(children: list[subprocess.Popen[bytes]]) -> bool:
    """Stop the children: the worker drains. A second Ctrl-C (or SIGTERM) while it does
    is passed on, as the worker's own message invites, and it exits at once (its jobs'
    leases lapse and they run again); nothing is left running when this returns. False
    when the drain was cut short so."""
    try:  # a second Ctrl-C may come at any point from here on, even mid-signalling
        _signal(children)
        _wait(children, STOP_TIMEOUT)
        return True
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the next few seconds are bounded
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _signal(children)
        _wait(children, HURRY_TIMEOUT)
        return False


def _signal(children: list[subprocess.Popen[bytes]]) -> None:
    for proc in children:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)


def _wait(children: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in children:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _terminal_foreground() -> Iterator[None]:
    """Make this process group the terminal's foreground while the demo runs, when this
    process runs in the foreground of a terminal (``make demo`` typed in a shell).

    The terminal then sends Ctrl-C to this group alone, so ``make`` waits for the drain and
    exits with this command's status instead of reporting an interrupt.
    """
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        yield  # no terminal: nothing to take over
        return
    try:
        previous = os.tcgetpgrp(tty)
        if previous != os.getpgrp():
            yield  # in the background: the terminal's signals do not come here
            return
        with _tty_writes_allowed():
            os.setpgid(0, 0)
            os.tcsetpgrp(tty, os.getpgrp())
        try:
            yield
        finally:
            with _tty_writes_allowed(), contextlib.suppress(OSError):
                os.tcsetpgrp(tty, previous)
    finally:
        os.close(tty)


@contextlib.contextmanager
def _tty_writes_allowed() -> Iterator[None]:
    # A process group that is not the foreground is stopped (SIGTTOU) when it sets the
    # terminal's foreground, unless it ignores that signal meanwhile.
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTTOU, old)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt

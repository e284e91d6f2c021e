"""The demo launcher: the addresses it prints, and its shutdown (one Ctrl-C drains, a
second one stops every child at once).

The launcher's stop runs here in a process of its own over a stand-in worker that, like
``runworkers``, drains on the first SIGTERM and exits on the second, so the test can send
the second Ctrl-C while the drain is under way (the end-to-end single Ctrl-C is
``test_demo.py``'s)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    def say(text):  # os.write: a handler may run inside print's own write
        os.write(1, (text + "\\n").encode())
    def on_term(*_):
        if getattr(on_term, "seen", False):
            say("worker: second signal, exiting"); sys.exit(1)
        on_term.seen = True
        say("worker: draining")
    signal.signal(signal.SIGTERM, on_term)
    say("worker: up")
    deadline = time.monotonic() + 150  # never outlive a failed test for long
    while time.monotonic() < deadline:
        time.sleep(0.05)
    say("worker: nobody stopped me")
    """
)

LAUNCHER = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    # Ctrl-C as a terminal's foreground process gets it: a shell starts a background job
    # (``&``, as CI starts a leg) with SIGINT ignored, which Python would then keep.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from sampleproject.demo.management.commands import rundemo
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True)
    print("launcher: worker", worker.pid, flush=True)
    try:
        print("launcher: waiting", flush=True)  # from here, a Ctrl-C is the first
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    print("launcher: drained" if rundemo._stop([worker]) else "launcher: cut short", flush=True)
    print("launcher: worker exit", worker.poll(), flush=True)
    """
)


def _kill_everything(launcher: subprocess.Popen[str], lines: list[str]) -> None:
    """Kill the launcher and the stand-in worker it named. The worker runs in a session of
    its own and holds the launcher's stdout pipe: killing the launcher alone leaves a read
    of that pipe waiting for ever (a CI run on a loaded machine hung there)."""
    if launcher.poll() is None:
        launcher.kill()
    if any("launcher: worker exit" in line for line in lines):
        return  # the launcher waited for it: its pid may be another process's by now
    for line in list(lines):
        if line.startswith("launcher: worker ") and line.split()[2].isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[2]), signal.SIGKILL)


def test_a_second_ctrl_c_stops_the_draining_worker_at_once_without_a_traceback() -> None:
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, WORKER],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as launcher:
        assert launcher.stdout is not None
        # A stuck launcher fails the test, not hangs it; generous, as two interpreters
        # starting on a loaded two-core machine can take tens of seconds.
        watchdog = threading.Timer(120, _kill_everything, (launcher, lines))
        watchdog.start()

        def read_until(text: str) -> None:
            while not any(text in line for line in lines):
                line = launcher.stdout.readline()  # type: ignore[union-attr]
                assert line, "".join(lines)
                lines.append(line)

        try:
            read_until("worker: up")
            read_until("launcher: waiting")
            launcher.send_signal(signal.SIGINT)  # the first Ctrl-C: the worker drains
            read_until("worker: draining")
            started = time.monotonic()
            launcher.send_signal(signal.SIGINT)  # the second: at once
            out, _ = launcher.communicate(timeout=30)
            lines.append(out)
        finally:
            watchdog.cancel()
            _kill_everything(launcher, lines)  # never leave the stand-in worker behind
    text = "".join(lines)
    assert launcher.returncode == 0, text
    assert time.monotonic() - started < 10, text  # not the 40 s drain window
    assert "worker: second signal, exiting" in text and "launcher: cut short" in text
    assert "launcher: worker exit 1" in text  # nothing left running
    assert "Traceback" not in text, text


def test_the_printed_address_is_one_a_browser_opens() -> None:
    from sampleproject.demo.management.commands.rundemo import _url

    assert _url("8001") == "http://127.0.0.1:8001"  # a port alone, as runserver reads it
    assert _url("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert _url("[::1]:8080") == "http://[::1]:8080"

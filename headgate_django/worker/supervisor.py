"""``--processes P``: run P worker processes and pass signals through to them.

Each child is a plain ``runworkers`` with ``--processes 1``, so a child behaves exactly like
a single worker (its own threads, leases and drain); the parent only forwards SIGTERM and
SIGINT and exits with the worst child exit code.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from collections.abc import Sequence

log = logging.getLogger("headgate_django.worker")


def supervise(processes: int, child_args: Sequence[str], worker_id: str | None = None) -> int:
    argv = [sys.executable, sys.argv[0], "runworkers", *child_args, "--processes", "1"]
    children: list[subprocess.Popen[bytes]] = []
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # Installed before any child exists, so a signal during start-up is not lost.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for n in range(processes):
        if received:
            break
        # A fixed --worker-id gets a suffix per child: two processes sharing one id would
        # both believe they hold the same singleton duty lease.
        own_id = ["--worker-id", f"{worker_id}.{n + 1}"] if worker_id else []
        # Each child in its own process group: a terminal's Ctrl-C reaches only this
        # parent, which forwards it once (a second signal means "stop now" to a child).
        children.append(subprocess.Popen([*argv, *own_id], process_group=0))
    log.info("started %d worker processes: %s", processes, ", ".join(str(c.pid) for c in children))
    codes = [child.wait() for child in children]
    # A child killed by a signal reports -N; exit like a shell would (128 + N).
    return max((c if c >= 0 else 128 - c for c in codes), default=0)

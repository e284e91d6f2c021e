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


def supervise(processes: int, child_args: Sequence[str]) -> int:
    argv = [sys.executable, sys.argv[0], "runworkers", *child_args, "--processes", "1"]
    children = [subprocess.Popen(argv) for _ in range(processes)]
    log.info("started %d worker processes: %s", processes, ", ".join(str(c.pid) for c in children))

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [child.wait() for child in children]
    return max(codes, key=abs, default=0)

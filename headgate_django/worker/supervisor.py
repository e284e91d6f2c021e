"""``--processes P``: fork P worker processes from the set-up parent and pass signals on.

Importing Django, the project and its apps and running the system checks is most of a
worker's start-up, so the parent does it once and forks (as gunicorn's ``--preload``
does); each child then runs exactly what ``--processes 1`` runs, in its own process. A
fork copies only the forking thread, so the parent refuses to fork while other threads
exist (a lock one of them held would stay locked in every child), and it closes its
database connections first so that no child shares a socket with another. The parent
only forwards the signals that stop a worker (SIGTERM, SIGINT, SIGHUP: see
``signals.stop_signals``), says which child ended on its own and how, and exits with the
worst child exit code.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from django.db import connections

from headgate_django.exceptions import ConfigurationError
from headgate_django.worker.exit import exit_code, exit_now
from headgate_django.worker.signals import stop_signals

log = logging.getLogger("headgate_django.worker")

#: ``serve(worker_id)`` runs one worker to its end in the calling process.
Serve = Callable[[str | None], None]


def supervise(processes: int, serve: Serve, worker_id: str | None = None) -> int:
    """Fork ``processes`` children that each call ``serve``; return the worst exit code."""
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        raise ConfigurationError(
            f"cannot fork worker processes while threads run ({', '.join(others)}): "
            "start one runworkers per process instead of --processes"
        )
    connections.close_all()
    # Everything set up so far (Django, the project, every module) lives as long as the
    # children. Frozen, it is never walked by their collections: less work for them, and
    # its memory pages stay shared with the parent instead of being copied when a
    # collection touches them (as the gc module's documentation advises before a fork).
    gc.freeze()
    # Whatever is still buffered would otherwise be written once by every child as well.
    sys.stdout.flush()
    sys.stderr.flush()
    live: list[int] = []
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    forwarded = stop_signals()
    for signum in forwarded:
        signal.signal(signum, forward)
    children: list[int] = []
    for n in range(processes):
        if received:
            break
        # A fixed --worker-id gets a suffix per child: two processes sharing one id would
        # both believe they hold the same singleton duty lease.
        own_id = f"{worker_id}.{n + 1}" if worker_id else None
        # Blocked across the fork: a signal that arrives meanwhile waits until the parent
        # knows the new pid, and in the child until the worker's own handlers are in place
        # (the worker unblocks them, see runworkers).
        signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(serve, own_id, parent)
        # Each child in its own process group: a terminal's Ctrl-C reaches only this
        # parent, which forwards it once (a second signal means "stop now" to a child).
        # Set on both sides of the fork, so it holds whichever runs first.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        children.append(pid)
        live.append(pid)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    log.info("started %d worker processes: %s", len(children), ", ".join(map(str, children)))
    codes = []
    # Each child is waited for by its pid, as it ends, whatever the order: a child that
    # dies while the others serve (the OOM killer) is said at once, not only in the exit
    # code once all have stopped; and no other child of this process is ever reaped.
    while live:
        time.sleep(CHILD_POLL)
        for pid in list(live):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            live.remove(pid)  # never signal a pid the system may give to another process
            codes.append(os.waitstatus_to_exitcode(status))
            if codes[-1] and not received:
                log.warning(
                    "worker process %d %s; %d of %d still running",
                    pid,
                    _ended(codes[-1]),
                    len(live),
                    len(children),
                )
    # A child killed by a signal reports -N; exit like a shell would (128 + N).
    return max((c if c >= 0 else 128 - c for c in codes), default=0)


#: Seconds between the parent's looks at its children.
CHILD_POLL = 0.2


def _ended(code: int) -> str:
    """How a child ended, from its exit code (-N: killed by signal N)."""
    if code > 0:
        return f"exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:  # a real-time signal has no name of its own
        name = f"signal {-code}"
    return f"was killed by {name}"


def _child(serve: Serve, worker_id: str | None, parent: int) -> NoReturn:
    """Run one worker in a forked child and leave with its exit code: never return."""
    code = 1
    try:
        os.setpgid(0, 0)
        threading.Thread(
            target=_stop_when_orphaned, args=(parent,), name="headgate-parent", daemon=True
        ).start()
        serve(worker_id)
        code = 0
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        log.exception("worker process %d failed", os.getpid())
    finally:
        exit_now(code)


#: Seconds between a child's looks at whether its parent still runs.
PARENT_POLL = 0.5


def _stop_when_orphaned(parent: int) -> None:
    """Stop this child, as a SIGTERM from the parent would (drain, then exit), once the
    parent is gone. Each child is in a process group of its own, so nothing else reaches
    it when the parent dies without forwarding a signal (SIGKILL, the OOM killer): without
    this it would go on claiming unsupervised, beside the pool that replaces it.
    ``os.getppid()`` changes when the parent dies, on every POSIX system."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    log.warning("worker process %d: its parent %d is gone; stopping", os.getpid(), parent)
    os.kill(os.getpid(), signal.SIGTERM)

"""Handle a worker's SIGTERM/SIGINT/SIGHUP on a thread of its own, not inside the signal
handler.

Python runs a signal handler on the main thread between two of its bytecodes, whatever
that thread holds at the moment. A worker's main thread runs the claim loop, which waits
on an ``Event``; stopping the worker sets that ``Event``, and an ``Event`` guards its flag
with a plain (not reentrant) lock. A handler that stopped the worker directly would, on
the rare signal that lands while the claim loop holds that lock, wait for it forever: the
worker would never exit. So the handler only writes the signal's number to a pipe, which
takes no lock, and a relay thread reads it and does the work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator

log = logging.getLogger("headgate_django.worker")


def stop_signals() -> frozenset[signal.Signals]:
    """The signals that stop a worker with a drain: SIGTERM, SIGINT and SIGHUP.

    SIGHUP is what a closing terminal (or ``kill -HUP``) sends. Its default action ends the
    process at once, leaving its jobs to lapse as crashes; a worker has no configuration
    to reload, so it drains as on SIGTERM instead. A process started with SIGHUP ignored
    (``nohup``) was asked to outlive its terminal: SIGHUP stays ignored there.
    """
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        return frozenset({signal.SIGTERM, signal.SIGINT})
    return frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


@contextlib.contextmanager
def relayed_signals(
    handle: Callable[[int], None], signums: Iterable[signal.Signals]
) -> Iterator[None]:
    """While the block runs, call ``handle(signum)`` on the relay thread for each of
    ``signums`` the process receives, in order. Enter it on the main thread (Python installs
    signal handlers only there).

    On the way out the previous handlers come back and the relay ends: a worker run through
    ``call_command`` inside a longer-lived process must not leave that process's signals
    pointing at a worker that has stopped.
    """
    read_end, write_end = os.pipe()

    def relay() -> None:
        # The relay must outlive a failing ``handle``: a dead relay leaves every later
        # signal written to a pipe nobody reads, and the worker unstoppable.
        try:
            while data := os.read(read_end, 1):
                try:
                    handle(data[0])
                except Exception:
                    log.exception("handling signal %d failed", data[0])
        finally:
            os.close(read_end)

    thread = threading.Thread(target=relay, name="headgate-signals", daemon=True)
    thread.start()

    def on_signal(signum: int, _frame: object) -> None:
        os.write(write_end, bytes([signum]))

    previous = {signum: signal.signal(signum, on_signal) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            # None: a handler Python did not install; the default is the nearest.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        os.close(write_end)  # the relay reads what is left, then the end of the pipe
        thread.join(timeout=5)

"""Handle a worker's SIGTERM/SIGINT on a thread of its own, not inside the signal handler.

Python runs a signal handler on the main thread between two of its bytecodes, whatever
that thread holds at the moment. A worker's main thread runs the claim loop, which waits
on an ``Event``; stopping the worker sets that ``Event``, and an ``Event`` guards its flag
with a plain (not reentrant) lock. A handler that stopped the worker directly would, on
the rare signal that lands while the claim loop holds that lock, wait for it forever: the
worker would never exit. So the handler only writes the signal's number to a pipe, which
takes no lock, and a relay thread reads it and does the work.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable


def relay_signals(handle: Callable[[int], None], signums: Iterable[signal.Signals]) -> None:
    """From now on, call ``handle(signum)`` on the relay thread for each of ``signums``
    the process receives, in order. Call it from the main thread (Python installs signal
    handlers only there)."""
    read_end, write_end = os.pipe()

    def relay() -> None:
        while data := os.read(read_end, 1):
            handle(data[0])

    threading.Thread(target=relay, name="headgate-signals", daemon=True).start()

    def on_signal(signum: int, _frame: object) -> None:
        os.write(write_end, bytes([signum]))

    for signum in signums:
        signal.signal(signum, on_signal)

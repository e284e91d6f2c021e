"""One read per view and poll interval, shared by the open sockets that show that view.

Every live page of the console polls: the pages the server draws (the overview, the
workers page, a job's progress) their whole data, the others (a workflow's graph, an
execution, the schedule and job lists) a fingerprint, and a snapshot when it moved; each
open socket about once or twice a second, on the ASGI process's one thread for ORM calls.
Fifteen to twenty sockets on one view in one process (a user's tabs, a wall of screens)
kept that thread busy re-reading the same data, and a later socket's handshake, whose
session reads queue on the same thread, waited past the server's connect timeout. Sockets
that show the same view (the key says what the data depends on, permissions included)
share it:

- a version read within the last interval is served as it is;
- a read in flight is waited for instead of started again (one read, however many wait);
- a version is rendered once, and not again while the data read stays the same;
- every socket of a view wakes when the next read is due (:meth:`Shared.wait`), so one
  read serves them all and a change reaches them no later than before;
- a failed read is raised to each socket waiting for it and leaves no version behind;
- a view's entry lives while a socket holds it (:meth:`Shared.release` drops the last).

Entries are kept per event loop, since an asyncio task belongs to one loop: Daphne runs one
per process, but the test client runs one per test, possibly on other threads, hence the
lock around the table. No Django here: the consumer passes in how to read and render.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

#: The shortest wait between two reads of one socket: a socket that wakes a hair before
#: its view's read is due gets the last version and comes back once it is due.
MIN_WAIT = 0.05


@dataclass(eq=False)
class Version:
    """Data as read, and its rendering (a page's fragment, or the snapshot a fingerprint
    stands for). Compared by identity: a read that finds the same data returns the same
    version, so a socket tells "nothing changed" in one comparison."""

    data: Any
    rendered: Any


@dataclass(eq=False)
class _Entry:
    holders: int = 0
    version: Version | None = None
    #: Loop time the last read ended, whether it succeeded or not.
    read_at: float = -math.inf
    flight: asyncio.Task[Version] | None = None


_entries: dict[tuple[asyncio.AbstractEventLoop, Hashable], _Entry] = {}
_lock = threading.Lock()


class Shared:
    """One socket's hold on its view's shared reads; :meth:`release` it when the socket
    ends. Made, used and released on the socket's event loop."""

    def __init__(self, key: Hashable, interval: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._interval = interval
        self._released = False
        self._key = (self._loop, key)
        with _lock:
            self._entry = _entries.setdefault(self._key, _Entry())
            self._entry.holders += 1

    def release(self) -> None:
        """The socket no longer shows the view; its entry goes with the last holder."""
        if self._released:
            return
        self._released = True
        with _lock:
            self._entry.holders -= 1
            if self._entry.holders == 0:
                del _entries[self._key]

    async def read(
        self, read: Callable[[], Awaitable[Any]], render: Callable[[Any], Awaitable[Any]]
    ) -> Version:
        """The view's version read within the interval, or the one being read, or a new
        read (``read``, then ``render`` if the data differs from the last version's). A
        socket cancelled while it waits leaves the read running for the others."""
        entry = self._entry
        if entry.flight is None:
            fresh = self._loop.time() < entry.read_at + self._interval
            if entry.version is not None and fresh:
                return entry.version
            entry.flight = self._loop.create_task(_read(entry, read, render))
            entry.flight.add_done_callback(_retrieved)
        return await asyncio.shield(entry.flight)

    def wait(self, interval: float | None = None) -> float:
        """Seconds until the view's next read is due (the last one's end plus the
        interval, also after a failed one), at least :data:`MIN_WAIT`. A socket that polls
        more slowly for now (``interval``, longer than the view's) still wakes with the
        other sockets of its view that do, when a read is due."""
        due = self._entry.read_at + (self._interval if interval is None else interval)
        return max(MIN_WAIT, due - self._loop.time())


async def _read(
    entry: _Entry, read: Callable[[], Awaitable[Any]], render: Callable[[Any], Awaitable[Any]]
) -> Version:
    try:
        data = await read()
        if entry.version is None or data != entry.version.data:
            entry.version = Version(data, await render(data))
        return entry.version
    except BaseException:
        entry.version = None
        raise
    finally:
        entry.read_at = asyncio.get_running_loop().time()
        entry.flight = None


def _retrieved(task: asyncio.Task[Version]) -> None:
    """Mark a failed read's error seen: every socket waiting for it may have gone."""
    if not task.cancelled():
        task.exception()

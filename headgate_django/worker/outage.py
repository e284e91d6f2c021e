"""How a worker reports a database it cannot reach.

A worker's threads (claims, heartbeat, duties, registry, listener) call the database
several times a second, and each retries on its own. A line per failed call buried the
one fact an operator needs under ten warnings a second. Instead: one warning when calls
start failing, a reminder every :data:`REMIND_EVERY` seconds while they still do, and one
line when a call succeeds again, with how long the outage lasted. Between those lines the
periodic status line carries the outage too: its counters alone (``claimed=0 … failed=0``)
read as an idle, healthy worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("headgate_django.worker")

#: Seconds between "still unavailable" reminders.
REMIND_EVERY = 30.0


class OutageLog:
    """The outage state every thread of one worker reports into."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._next_reminder = 0.0
        self._failures = 0

    def failed(self, what: str, exc: BaseException) -> None:
        """A database call (``what``) failed with ``exc``; it will be retried."""
        with self._lock:
            now = self._clock()
            self._failures += 1
            if self._since is None:
                self._since = now
                self._next_reminder = now + REMIND_EVERY
                log.warning("database unavailable (%s failed: %s); retrying", what, exc)
            elif now >= self._next_reminder:
                self._next_reminder = now + REMIND_EVERY
                log.warning(
                    "database still unavailable after %.0f s (%d failed calls; last: %s)",
                    now - self._since,
                    self._failures,
                    exc,
                )

    def succeeded(self) -> None:
        """A database call went through: the end of an outage, if there was one."""
        if self._since is None:  # the common case, without the lock
            return
        with self._lock:
            if self._since is None:
                return
            log.warning(
                "database available again after %.1f s (%d failed calls)",
                self._clock() - self._since,
                self._failures,
            )
            self._since = None
            self._failures = 0

    def down_for(self) -> float:
        """Seconds since calls started failing; 0 while they go through."""
        since = self._since
        return 0.0 if since is None else self._clock() - since

    def status_field(self) -> str | None:
        """The status line's ``database_unavailable=…`` field while calls fail, else None."""
        down = self.down_for()
        return f"database_unavailable={down:.0f}s" if down else None

"""Wake-ups on enqueue, with polling as the fallback: the runner's idle wait ends early.

PostgreSQL: channel ``headgate_wakeup`` carries the queue name whenever a job becomes
available (an insert notifies from its own statement, an update through the trigger of
migrations 0003 and 0014); :class:`Listener` holds one dedicated connection and sets the
runner's wake event. Through a transaction-pooling proxy (PgBouncer) a ``LISTEN`` lives on
a server session the client holds only for one statement, so notifications never reach
it: the listener first proves that one sent from another session arrives, and otherwise
says so once and leaves the runner to its polling. ``HEADGATE["LISTEN_USING"]`` names an
alias that reaches PostgreSQL directly, which keeps the wake-ups behind such a proxy. SQLite: :class:`SqliteWatcher` notices other connections'
commits through ``PRAGMA data_version``. MySQL/MariaDB, or a failed wake source, simply
leave the runner polling.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.conf import headgate_settings
from headgate_django.store import job_available
from headgate_django.store.insert import WAKE_CHANNEL as CHANNEL

log = logging.getLogger("headgate_django.notify")
#: Seconds without a new available job after which the SQLite watcher ticks more slowly.
_QUIET_AFTER = 1.0
#: Seconds a new LISTEN session waits for its probe notification before it gives up.
PROBE_TIMEOUT = 2.0
#: The probe's payload prefix: no queue is named like this (queue names have no colon).
_PROBE = "headgate:probe:"


def listen_params(using: str) -> dict[str, Any]:
    """Connection parameters of the LISTEN sessions: those of ``HEADGATE["LISTEN_USING"]``
    when it is set, else of the worker's own alias."""
    alias = headgate_settings.LISTEN_USING or using
    return connections[alias].get_connection_params()


def notifications_arrive(conn: Any, params: dict[str, Any]) -> bool:
    """Whether a notification sent from another session reaches ``conn``, which LISTENs on
    the wake-up channel: not through a transaction-pooling proxy."""
    import psycopg

    token = f"{_PROBE}{secrets.token_hex(8)}"
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_notify(%s, %s)", [CHANNEL, token])
    deadline = time.monotonic() + PROBE_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        if any(note.payload == token for note in conn.notifies(timeout=left)):
            return True
    return False


class Listener(threading.Thread):
    def __init__(
        self, wake: threading.Event, queues: Collection[str] | None, using: str = "default"
    ) -> None:
        super().__init__(name="headgate-listen", daemon=True)
        self.wake = wake
        self.queues = set(queues) if queues else None
        self.using = using
        self._halt = threading.Event()  # not _stop: that name is Thread internals

    @staticmethod
    def supported(using: str = "default") -> bool:
        return connections[using].vendor == "postgresql"

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        import psycopg

        delay = 0.5
        proven = False
        failing = False  # since the last failure: an outage is reported once, not per retry
        while not self._halt.is_set():
            try:
                params = listen_params(self.using)
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if not proven and not notifications_arrive(conn, params):
                        log.warning(
                            "LISTEN/NOTIFY does not reach this worker (a transaction-pooling "
                            "proxy such as PgBouncer?): it polls for new jobs instead, at "
                            "most IDLE_BACKOFF_MAX apart. Set HEADGATE['LISTEN_USING'] to a "
                            "DATABASES alias that reaches PostgreSQL directly to keep "
                            "wake-ups, or LISTEN_NOTIFY = False to skip this check."
                        )
                        return
                    proven = True
                    delay = 0.5
                    if failing:
                        log.info("LISTEN connection back: wake-ups resume")
                        failing = False
                    self.wake.set()  # anything enqueued while we were away
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if note.payload.startswith(_PROBE):
                                continue  # another worker's probe: no job behind it
                            if self.queues is None or note.payload in self.queues:
                                self.wake.set()
            except Exception as exc:  # keep polling; reconnect with backoff
                if failing:
                    log.debug("LISTEN connection failed again (%s); retrying in %g s", exc, delay)
                else:
                    log.warning("LISTEN connection failed (%s); polling until it returns", exc)
                    failing = True
                self._halt.wait(delay)
                delay = min(delay * 2, 10.0)


class SqliteWatcher(threading.Thread):
    """Wakes an idle runner soon after another connection makes a job available on SQLite.

    SQLite has no notifications, but ``PRAGMA data_version`` on a connection changes
    whenever another connection commits to the database file, and reading it reads no
    table. So this thread
    holds its own connection, reads that counter every ``interval``, and only when it moved
    asks, with one indexed read, whether a job is available in the runner's queues. An
    unrelated write (a web request, the worker's own acks) costs one such read and no wake;
    a claim, which takes SQLite's single write lock, happens only when there is work.

    Each tick costs about 0.1 ms of CPU (the timer wake and the shared-memory read), so the
    watcher ticks every ``interval`` only while jobs are arriving: after a second in which
    no commit left one available, it ticks every ``quiet_interval`` (the runner's shortest
    idle poll). The duties' own few commits a second do not keep it fast.
    """

    def __init__(
        self,
        wake: threading.Event,
        queues: Collection[str] | None,
        interval: timedelta,
        quiet_interval: timedelta,
        using: str = "default",
    ) -> None:
        super().__init__(name="headgate-sqlite-watch", daemon=True)
        self.wake = wake
        self.queues = sorted(queues) if queues else None
        self.interval = interval.total_seconds()
        self.quiet_interval = max(self.interval, quiet_interval.total_seconds())
        self.using = using
        self._halt = threading.Event()
        self._failing = False  # since the last failure: reported once, not every retry

    @staticmethod
    def supported(using: str = "default") -> bool:
        from django.db.backends.sqlite3.base import DatabaseWrapper

        conn = connections[using]
        # An in-memory database has no file whose commits other connections could see.
        return isinstance(conn, DatabaseWrapper) and not conn.is_in_memory_db()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        conn = connections[self.using]
        try:
            while not self._halt.is_set():
                try:
                    self._watch(conn)
                except Exception as exc:  # the runner keeps polling meanwhile
                    if self._failing:
                        log.debug("SQLite wake-up watch failed again (%s); retrying in 1 s", exc)
                    else:
                        log.warning(
                            "SQLite wake-up watch failed (%s); polling until it returns", exc
                        )
                        self._failing = True
                    conn.close()
                    self._halt.wait(1.0)
        finally:
            conn.close()

    def _watch(self, conn: BaseDatabaseWrapper) -> None:
        conn.ensure_connection()
        # The sqlite3 connection itself: this read runs up to 200 times a second, so it
        # skips the Python of Django's cursor wrapper.
        raw = conn.connection
        seen = raw.execute("PRAGMA data_version").fetchone()[0]
        if self._failing:
            log.info("SQLite wake-up watch back: wake-ups resume")
            self._failing = False
        arrived = time.monotonic()  # when a commit last left a job available
        while not self._halt.is_set():
            busy = time.monotonic() - arrived < _QUIET_AFTER
            # A plain sleep, not an Event wait: measured at 5 ms ticks, the watcher's CPU
            # fell by a third. stop() is still seen within one tick.
            time.sleep(self.interval if busy else self.quiet_interval)
            version = raw.execute("PRAGMA data_version").fetchone()[0]
            if version == seen:
                continue
            seen = version
            if not self.wake.is_set():  # when it is, the runner is about to claim anyway
                if not job_available(self.queues, using=self.using):
                    continue
                self.wake.set()
            arrived = time.monotonic()


def wake_source(
    wake: threading.Event, queues: Collection[str] | None, using: str = "default"
) -> Listener | SqliteWatcher | None:
    """The thread that ends a runner's idle wait on enqueue here, if the database has one."""
    s = headgate_settings
    if s.LISTEN_NOTIFY and Listener.supported(using):
        return Listener(wake, queues, using)
    if s.SQLITE_WAKE_INTERVAL is not None and SqliteWatcher.supported(using):
        return SqliteWatcher(wake, queues, s.SQLITE_WAKE_INTERVAL, s.IDLE_BACKOFF_MIN, using)
    return None

"""Wake-ups on enqueue: PostgreSQL LISTEN/NOTIFY, with polling as the fallback.

A trigger (migration 0003) notifies channel ``headgate_wakeup`` with the queue name when a
job becomes available; this listener holds one dedicated connection and sets the runner's
wake event. Other databases, or a failed listener, simply leave the runner polling.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection

from django.db import connections

log = logging.getLogger("headgate_django.notify")
CHANNEL = "headgate_wakeup"


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
        while not self._halt.is_set():
            try:
                params = connections[self.using].get_connection_params()
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.5
                    self.wake.set()  # anything enqueued while we were away
                    while not self._halt.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if self.queues is None or note.payload in self.queues:
                                self.wake.set()
            except Exception as exc:  # keep polling; reconnect with backoff
                log.warning("LISTEN connection failed (%s); polling until it returns", exc)
                self._halt.wait(delay)
                delay = min(delay * 2, 10.0)

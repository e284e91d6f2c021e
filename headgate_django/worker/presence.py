"""The worker's entry in the registry, and its outcomes per queue for the per-minute series.

Owned by the heartbeat thread. Handler and ack threads only :meth:`Presence.tally` an
outcome (a dict update under a lock); the heartbeat thread upserts the registry row every
``HEADGATE["WORKER_HEARTBEAT"]`` and flushes the tallies into the store's current minute
at most every :data:`FLUSH_EVERY` while there are any: one statement each, on the
heartbeat's own connection, so the claim loop and the acker never wait for them. A flush
the database refuses is kept and added to the next one.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.store.workers import (
    Beat,
    WorkerView,
    queue_minutes_add,
    worker_heartbeat,
    worker_register,
)

#: Seconds between flushes of the per-minute tallies while a worker records outcomes.
FLUSH_EVERY = 1.0
#: ``settle`` labels (as the status line counts them) → the per-minute series they add to.
_SERIES_OF_LABEL = {
    "completed": 0,
    "archived": 1,
    "undecodable": 1,
    "retried": 2,
}


class Presence:
    """What the registry knows of one worker, and when it next says so."""

    def __init__(
        self, worker_id: str, *, queues: list[str] | None, concurrency: int, using: str
    ) -> None:
        self.worker_id = worker_id
        self.queues = queues
        self.concurrency = concurrency
        self.using = using
        self.every = headgate_settings.WORKER_HEARTBEAT.total_seconds()
        self.next_beat = float("-inf")  # the first beat registers the worker at once
        self.next_flush = float("-inf")
        self._lock = threading.Lock()
        self._tallies: dict[str, list[int]] = {}

    def tally(self, queue: str, label: str, n: int = 1) -> None:
        """Count ``n`` outcomes of a job of ``queue`` by their ``settle`` label."""
        series = _SERIES_OF_LABEL.get(label)
        if series is None or n <= 0:
            return
        with self._lock:
            self._tallies.setdefault(queue, [0, 0, 0])[series] += n

    def flush(self) -> None:
        """Add the tallies to the store's current minute; kept for the next try on error."""
        with self._lock:
            taken, self._tallies = self._tallies, {}
        if not taken:
            return
        try:
            queue_minutes_add({q: (c, f, r) for q, (c, f, r) in taken.items()}, using=self.using)
        except BaseException:
            with self._lock:
                for queue, numbers in taken.items():
                    kept = self._tallies.setdefault(queue, [0, 0, 0])
                    for i, n in enumerate(numbers):
                        kept[i] += n
            raise

    def beat(
        self,
        *,
        held_queues: Iterable[str],
        claimed: int,
        completed: int,
        retried: int,
        failed: int,
        stopped: bool = False,
    ) -> None:
        """Upsert the registry row: counters since start, jobs held now by queue."""
        by_queue = Counter(held_queues)
        worker_heartbeat(
            self._beat(
                in_flight=sum(by_queue.values()),
                in_flight_by_queue=dict(by_queue),
                claimed=claimed,
                completed=completed,
                retried=retried,
                failed=failed,
            ),
            stopped=stopped,
            using=self.using,
        )

    def register(self) -> WorkerView | None:
        """Take the worker id in the registry before the worker starts; the live worker
        that has it instead (``store.workers.worker_register``).

        A row this host wrote from a process that no longer exists is taken over at once:
        a worker restarted under its own id right after a crash (a supervisor restarts it
        within seconds) would otherwise be refused until the old row counts as gone."""
        beat = self._beat()
        holder = worker_register(beat, using=self.using)
        if holder is not None and holder.host == beat.host and not _alive(holder.pid):
            holder = worker_register(beat, dead_pid=holder.pid, using=self.using)
        return holder

    def _beat(self, **counters: Any) -> Beat:
        return Beat(
            worker_id=self.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            heartbeat=headgate_settings.WORKER_HEARTBEAT,
            **counters,
        )


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (another user's counts: it may be
    anything, a reused pid included, so it is never taken for dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

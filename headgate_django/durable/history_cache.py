"""A per-process cache of the histories this worker replayed, so a pass reads only the
events appended since its last pass of the same execution (history is append-only).

Without it every pass would reload the whole history: a workflow of N sequential
Operations would read O(N²) rows over its life. An entry is keyed by the execution id and
its ``created_at``, so a vacuumed id started again never meets the old events.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime

from headgate_django.kernel.replay_events import Event
from headgate_django.models import Execution
from headgate_django.store.durable import history_load

#: Executions kept; the least recently replayed is dropped first.
CAPACITY = 1024


class HistoryCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[datetime, list[Event]]] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, header: Execution, *, using: str = "default") -> list[Event]:
        """The history up to ``header.last_seq``, reading only what the cache lacks."""
        with self._lock:
            entry = self._entries.get(header.id)
        known: list[Event] = []
        if entry is not None and entry[0] == header.created_at:
            known = [e for e in entry[1] if e.seq <= header.last_seq]
        fresh = history_load(header.id, after_seq=len(known), upto_seq=header.last_seq, using=using)
        events = known + fresh
        if [e.seq for e in events[-1:]] != [header.last_seq]:  # a gap: trust nothing cached
            events = history_load(header.id, upto_seq=header.last_seq, using=using)
        self.store(header, events)
        return list(events)

    def store(self, header: Execution, events: list[Event]) -> None:
        with self._lock:
            self._entries[header.id] = (header.created_at, list(events))
            self._entries.move_to_end(header.id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def forget(self, execution_id: str) -> None:
        with self._lock:
            self._entries.pop(execution_id, None)


histories = HistoryCache()

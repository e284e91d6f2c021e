"""A per-process cache of the histories this worker replayed, so a pass reads only the
events appended since its last pass of the same execution (history is append-only).

Without it every pass would reload the whole history: a workflow of N sequential
Operations would read O(N²) rows over its life. An entry is tied to the execution's
``created_at`` and run id, so a vacuumed id started again never meets the old events, and
neither does the next run of an execution that continued as new.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime

from headgate_django.kernel.replay_events import Event
from headgate_django.store.durable import Header, execution_read, history_load

#: Executions kept; the least recently replayed is dropped first.
CAPACITY = 1024


class HistoryCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[tuple[datetime, str], list[Event]]] = OrderedDict()
        self._lock = threading.Lock()

    def read(
        self, execution_id: str, *, lock: bool = False, using: str = "default"
    ) -> tuple[Header, list[Event]] | None:
        """The header (with the store time) and the whole history, in one round trip when
        the cache holds what came before; None when the execution does not exist.
        ``lock`` holds the header's row lock until the caller's transaction ends."""
        with self._lock:
            stamp, known = self._entries.get(execution_id, (None, []))
        read = execution_read(execution_id, after_seq=len(known), lock=lock, using=using)
        if read is None:
            self.forget(execution_id)
            return None
        header, fresh = read
        events = [*known, *fresh]
        if stamp != (header.created_at, header.run_id) or len(events) != header.last_seq:
            # Another life or run of this id, or a gap: trust nothing cached.
            events = history_load(execution_id, upto_seq=header.last_seq, using=using)
        self.store(header, events)
        return header, events

    def store(self, header: Header, events: list[Event]) -> None:
        with self._lock:
            self._entries[header.id] = ((header.created_at, header.run_id), list(events))
            self._entries.move_to_end(header.id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def forget(self, execution_id: str) -> None:
        with self._lock:
            self._entries.pop(execution_id, None)


histories = HistoryCache()

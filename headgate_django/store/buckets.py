"""The rate buckets as one claim uses them: locked for its transaction, refilled to the
store clock's now (``kernel.admission.refill``), spent in memory and written back once.

Every claim that spends a bucket locks all of them, in name order, so claims spend them
one after the other and never deadlock over them. PostgreSQL's governed claim function
(migration 0028) does the same on the server; this is the reference for what it does.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.kernel import admission as rates
from headgate_django.store import vendor as v


class Buckets:
    """The rate buckets, locked for the claim's transaction and refilled to the store
    clock's now; spent in memory, written back once (:meth:`save`)."""

    def __init__(self, cursor: Any, conn: BaseDatabaseWrapper) -> None:
        cursor.execute(  # the store clock's now in the same round trip
            "SELECT name, limit_per_window, window_ms, burst, paused, tokens, refilled_at_ms, "
            f"{v.now(conn)} FROM headgate_rate_bucket ORDER BY name{v.for_update(conn)}",
            [],
        )
        found = cursor.fetchall()
        rows = [row[:7] for row in found]
        self.now_ms = int(v.parse_instant(conn, found[0][7]).timestamp() * 1000) if found else 0
        #: name → [limit, window_ms, burst, paused, tokens now]
        self.state: dict[str, list[Any]] = {
            name: [
                limit,
                window_ms,
                burst,
                bool(paused),
                rates.refill(tokens, burst, limit, window_ms, self.now_ms - refilled_at),
            ]
            for name, limit, window_ms, burst, paused, tokens, refilled_at in rows
        }
        self._spent: set[str] = set()

    def allows(self, rate_class: str | None, weight: int) -> bool:
        """Whether a job of the class and weight may be admitted (an unknown class may)."""
        bucket = self.state.get(rate_class) if rate_class is not None else None
        if bucket is None:
            return True
        _, _, burst, paused, tokens = bucket
        return not paused and tokens >= rates.spend_needed(weight, burst)

    def spend(self, rate_class: str | None, weight: int) -> None:
        if rate_class is not None and rate_class in self.state:
            self.state[rate_class][4] -= weight
            self._spent.add(rate_class)

    def closed(self) -> list[str]:
        """Classes that can admit nothing now: paused, or under one token."""
        return sorted(n for n, b in self.state.items() if b[3] or b[4] < 1)

    def open(self) -> list[str]:
        return sorted(n for n, b in self.state.items() if not (b[3] or b[4] < 1))

    def save(self, cursor: Any) -> None:
        for name in sorted(self._spent):
            cursor.execute(
                "UPDATE headgate_rate_bucket SET tokens = %s, refilled_at_ms = %s WHERE name = %s",
                [self.state[name][4], self.now_ms, name],
            )


def store_clock_ms(cursor: Any, conn: BaseDatabaseWrapper) -> int:
    """The store clock's now, in epoch milliseconds."""
    cursor.execute(f"SELECT {v.now(conn)}", [])
    return int(v.parse_instant(conn, cursor.fetchone()[0]).timestamp() * 1000)

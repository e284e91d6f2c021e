"""Producer backpressure: a queue's limit of unfinished jobs, checked in the enqueue's own
transaction so concurrent producers are counted one after the other."""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.exceptions import BackpressureError
from headgate_django.kernel.states import LIVE_STATES, State
from headgate_django.models import BULK_STATES
from headgate_django.store import vendor as v

#: A queue's unfinished jobs, in three parts that each repeat a partial index's condition
#: literally: available ones (the claim index), running ones (the lease index), and the
#: rest (``headgate_job_state_rare``). One ``state IN (…)`` of all five states matched no
#: partial index: PostgreSQL expected to meet enough of them at once in a sequential scan
#: and read the table instead (300 ms an enqueue beside 1.1 million finished jobs), and
#: SQLite read it all under the write lock.
_UNFINISHED = (
    f"state = '{State.AVAILABLE.value}' AND queue = %s",
    f"state = '{State.RUNNING.value}' AND queue = %s",
    f"NOT (state IN ({v.states_in(State(s) for s in BULK_STATES)})) "
    f"AND state IN ({v.states_in(sorted(LIVE_STATES - {State.AVAILABLE, State.RUNNING}))}) "
    "AND queue = %s",
)


def unfinished(cursor: Any, queue: str, *, up_to: int | None = None) -> int:
    """The queue's unfinished jobs (pending, scheduled, available, running, retryable),
    counted no further than ``up_to``."""
    params: list[Any] = [queue] * len(_UNFINISHED)
    sql = " UNION ALL ".join(f"SELECT 1 FROM headgate_job WHERE {part}" for part in _UNFINISHED)
    if up_to is not None:
        sql += " LIMIT %s"
        params.append(up_to)
    cursor.execute(f"SELECT COUNT(*) FROM ({sql}) unfinished", params)
    return int(cursor.fetchone()[0])


def check_backpressure(conn: BaseDatabaseWrapper, incoming: dict[str, int], *, using: str) -> None:
    """Refuse a batch that would take any queue past its backpressure limit.

    Runs in the enqueue's transaction: it locks each limited queue's row (in name order),
    which every enqueue into that queue takes, then counts; the lock is held until the
    batch commits, so concurrent producers are counted one after the other and the limit
    is exact. Raises :class:`~headgate_django.exceptions.BackpressureError`.
    """
    queues = sorted(incoming)
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT queue, max_unfinished FROM headgate_backpressure "
            f"WHERE queue IN ({v.placeholders(len(queues))}) ORDER BY queue{v.for_update(conn)}",
            queues,
        )
        for queue, limit in cursor.fetchall():
            n = incoming[queue]
            current = unfinished(cursor, queue, up_to=limit + 1)
            if current + n > limit:
                raise BackpressureError(
                    f"queue {queue!r} holds {current} unfinished job(s), its limit is {limit}: "
                    f"{n} more would pass it",
                    queue=queue,
                    limit=limit,
                    current=current,
                    incoming=n,
                )

"""PostgreSQL: a governed queue's claim in one round trip, ``headgate_claim_governed``.

``store.admitted`` claims a governed queue in one transaction of about a dozen statements
(lock, ceiling, running count, buckets, rotation, partition probes, candidates, writes,
lease). On PostgreSQL the function of migrations 0028 and 0030 runs those same steps on the
server, so a governed claim costs one statement in autocommit, as the plain claim does (a
claim of 500 from fair, weighted, rated queues: about 11 ms instead of 43; the plain claim
takes about 8, ``docs/benchmarks.md``). The Python steps stay the reference for what it decides:
``tests/conformance/test_governed_claim_function.py`` claims the same jobs both ways and
compares what each admitted and wrote.

Not every governed queue is claimed here: a ceiling that disposes of jobs (``discard``,
``cancel_incoming``, ``cancel_running``) runs the hooks of finished jobs, which are Python,
so those queues keep the portable path. The function says so itself (a row at position 0)
when this process's view of the policies is older than the ceiling's strategy.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.store import vendor as v
from headgate_django.store.prepared import server_bound_cursor

FUNCTION = "headgate_claim_governed"
#: Positions of the rows that are not jobs: the queue is not the function's to claim, or
#: it wrote the levels it was given.
_DISPOSES, _LEVELED = 0, -1


def claims_on_server(conn: BaseDatabaseWrapper) -> bool:
    """Whether this database claims governed queues with :data:`FUNCTION`."""
    return conn.vendor == "postgresql" and v.has_pg_function(conn, FUNCTION)


def claim_queue_on_server(
    conn: BaseDatabaseWrapper,
    queue: str,
    need: int,
    claimer: Any,
    *,
    weighted: bool,
    levels: dict[str, int],
) -> tuple[list[Any], bool] | None:
    """Claim up to ``need`` jobs of the governed ``queue`` for ``claimer`` (a
    ``store.admitted.Claimer``), adding what it leased to the queue's ledger when
    ``weighted`` and, if it leased all ``need``, raising other queues' ledgers to
    ``levels`` (``store.weights``). The rows in the order admitted, as
    ``store.claim.COLUMNS``, and whether it wrote the levels; or ``None`` when the
    queue's ceiling disposes of jobs and the portable path must claim it."""
    from headgate_django.store.claim import PG_NAMES, PG_READ_BACK, names_param

    with server_bound_cursor(conn) as cursor:  # its text never changes
        cursor.execute(
            f"SELECT pos, {PG_READ_BACK} FROM {FUNCTION}("
            f"%s::varchar, %s::integer, {PG_NAMES}, %s::varchar, %s::varchar, %s::bigint, "
            f"%s::boolean, {PG_NAMES}, string_to_array(%s::text, ',')::bigint[]) "
            "ORDER BY pos",
            [
                queue,
                need,
                names_param(claimer.kinds),
                claimer.lease_id,
                claimer.worker_id[:255],
                claimer.ttl_ms,
                weighted,
                names_param(list(levels)),
                ",".join(str(level) for level in levels.values()),
            ],
        )
        rows = cursor.fetchall()
    if rows and rows[0][0] == _DISPOSES:
        return None
    wrote = bool(rows) and rows[0][0] == _LEVELED
    return [row[1:] for row in rows[wrote:]], wrote

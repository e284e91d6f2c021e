"""Effect records (``ctx.once``) leave with their job.

Every store path that deletes job rows (eviction, delete at ack, revoke, an operator's
delete, a failed node's doomed descendants, a vacuumed durable execution's jobs) deletes
their records in the same transaction with :func:`effects_delete_gone`, through the
``(job_id, name)`` key: no record outlives its job, so a job enqueued again under a gone
job's id does not find its records and skip its effects.

Records left by jobs deleted some other way (before this upgrade, by a worker of an older
version during a rolling one, by a project's own ``DELETE``) are found by
:func:`effect_sweep`, the ``effects-prune`` duty: each run reads the next slice of the
table by primary key and wraps round, so a run reads its slice and never the table (the
duty it replaces read every kept record each minute to find none).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db import transaction

from headgate_django.store import vendor as v

#: Job ids per statement of :func:`effects_delete_gone`.
CHUNK = 1000
_GONE = "NOT EXISTS (SELECT 1 FROM headgate_job j WHERE j.id = headgate_effect.job_id)"
#: PostgreSQL: the records of the jobs a ``WITH gone AS (DELETE … RETURNING id)`` deletes,
#: in the same statement (a delete at ack runs alone, in autocommit). The job ids carry the
#: job table's "C" collation, which the records' key is not in: compared as they come, the
#: records were read whole (200,000 for an ack of 100, 0.6 s) instead of through the key.
PG_DELETE_WITH_GONE = (
    "effects AS (DELETE FROM headgate_effect WHERE job_id = "
    'ANY(ARRAY(SELECT id COLLATE "default" FROM gone)))'
)


def effects_delete_gone(cursor: Any, job_ids: Collection[str]) -> None:
    """Delete the records of those of ``job_ids`` whose job row is gone: the caller has
    just deleted them, in this transaction. An id whose delete found the job in another
    state (and kept it) keeps its records."""
    ids = list(job_ids)
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        cursor.execute(
            f"DELETE FROM headgate_effect WHERE job_id IN ({v.placeholders(len(chunk))}) "
            f"AND {_GONE}",
            chunk,
        )


def effect_sweep(*, after: int, limit: int = 1000, using: str = "default") -> tuple[int, int]:
    """Delete the records of gone jobs among the ``limit`` records after id ``after`` (from
    the first, when none is after it); return how many, and the id the next sweep starts
    after (0 once it reached the end).

    It reads the slice's ids off the primary key, then deletes within that range the
    records whose job, probed by its key, is gone: about ``limit`` records read whatever
    the table's size."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*), MAX(id) FROM (SELECT id FROM headgate_effect WHERE id > %s "
            "ORDER BY id LIMIT %s) slice",
            [after, limit],
        )
        read, last = cursor.fetchone()
        if not read:
            return effect_sweep(after=0, limit=limit, using=using) if after else (0, 0)
        cursor.execute(
            f"DELETE FROM headgate_effect WHERE id > %s AND id <= %s AND {_GONE}", [after, last]
        )
        pruned = cursor.rowcount
    return pruned, (int(last) if read == limit else 0)

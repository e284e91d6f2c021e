"""Attempt logs (``ctx.log``): saved with the outcome of the attempt that logged them, in
the same fenced transaction, and read back one job at a time.

An attempt's record is ``{attempt, outcome, at, entries, dropped}``; the job's ``logs``
column keeps the newest :data:`MAX_LOGGED_ATTEMPTS` of them. Outcomes that save logs:
``success``, ``error`` (a retry or the last attempt), ``skip`` and ``undecodable``; a
snooze, a revoke or a lost lease saves none (the reference's rule). ``at`` is the store
clock of the write. The column is read by :func:`job_logs` only, never by a list.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.models import Job
from headgate_django.store import vendor as v
from headgate_django.store.rows import prep

if TYPE_CHECKING:
    from headgate_django.store.fenced import Completion

MAX_LOGGED_ATTEMPTS = 20


def logged(
    conn: BaseDatabaseWrapper, existing: Any, record: dict[str, Any], outcome: str, at: Any
) -> Any:
    """The ``logs`` column's new value, ``record`` appended, as a query parameter."""
    if isinstance(existing, str | bytes):
        existing = json.loads(existing)
    entry = {**record, "outcome": outcome, "at": v.parse_instant(conn, at).isoformat()}
    return prep(conn, "logs", [*list(existing or []), entry][-MAX_LOGGED_ATTEMPTS:])


def save_completion_logs(
    cursor: Any, conn: BaseDatabaseWrapper, completions: Sequence[Completion]
) -> None:
    """Save the logs of successes about to be completed, inside the completion's
    transaction: a row still held gets its record (and is locked until the commit), a lost
    one nothing, and then its completion does not land either."""
    for c in completions:
        if c.logs is None or c.delete:
            continue  # retention 0: the row, and with it its logs, goes at this ack
        ref = c.ref
        cursor.execute(
            f"SELECT logs, {v.now(conn)} FROM headgate_job WHERE id = %s AND lease_id = %s "
            f"AND fence = %s AND state = 'running'{v.for_update(conn)}",
            [ref.job_id, ref.lease_id, ref.fence],
        )
        row = cursor.fetchone()
        if row is None:
            continue
        cursor.execute(
            "UPDATE headgate_job SET logs = %s WHERE id = %s",
            [logged(conn, row[0], c.logs, "success", row[1]), ref.job_id],
        )


def job_logs(job_id: str, *, using: str = "default") -> list[dict[str, Any]] | None:
    """The job's saved attempt records, oldest first; ``None`` when there is no such job."""
    found = Job.objects.using(using).filter(pk=job_id).values_list("logs", flat=True)
    rows = list(found[:1])
    if not rows:
        return None
    return list(rows[0] or [])

"""Deadlines: past its ``deadline`` (store clock) a job is archived, reason
``deadline_exceeded``, and never claimed again.

Three places find a job past it, and each archives it in the same way (one attempt entry
of kind ``deadline_exceeded``, no attempt charged, the finishing hooks run):

- the ``deadlines`` duty, for jobs still waiting (:func:`job_archive_past_deadline`);
- the claim, for a job it took that is already past it (:func:`job_expire_claimed`): the
  handler never starts;
- a running attempt's next renewal or fenced write (:func:`archive_held_past_deadline`):
  the write is refused and the handler cancelled; or, if its worker died, the reclaimer
  (:func:`archive_reclaimed_past_deadline`), which then charges no crash.

Only jobs that have a deadline pay anything: the duty reads a partial index of them, and a
claim looks again only when one of its jobs has a deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.kernel.states import WAITING_STATES, Event, State, check
from headgate_django.store import vendor as v
from headgate_django.store.fenced import (
    LeaseRef,
    after_finish,
    append_error,
    error_entry,
)
from headgate_django.store.hooks import Death, after_archive
from headgate_django.store.rows import prep

REASON = "deadline_exceeded"
_WAITING = v.states_in(sorted(WAITING_STATES))
#: The columns an archive needs, then the store clock.
_READ = "id, state, errors, attempt, workflow_id, deadline, kind, queue"


def job_archive_past_deadline(*, limit: int = 500, using: str = "default") -> list[str]:
    """Archive up to ``limit`` waiting jobs whose deadline has passed; their ids.

    Rows another transaction holds are skipped (``SKIP LOCKED``), for the next pass.
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT {_READ}, {v.now(conn)} FROM headgate_job "
            f"WHERE deadline IS NOT NULL AND state IN ({_WAITING}) "
            f"AND deadline <= {v.now(conn)} ORDER BY deadline LIMIT %s{v.skip_locked(conn)}",
            [limit],
        )
        rows = cursor.fetchall()
        _archive(cursor, conn, rows)
    return [row[0] for row in rows]


def archive_reclaimed_past_deadline(cursor: Any, conn: BaseDatabaseWrapper, limit: int) -> None:
    """Inside the reclaimer's transaction: archive running jobs whose lease expired after
    their deadline passed, before the reclaimer charges them a crash (which could
    quarantine a fingerprint for a job that was not going to run again anyway)."""
    cursor.execute(
        f"SELECT {_READ}, {v.now(conn)} FROM headgate_job WHERE state = %s "
        f"AND lease_expires_at < {v.cutoff(conn)} AND deadline IS NOT NULL "
        f"AND deadline <= {v.now(conn)} LIMIT %s{v.skip_locked(conn)}",
        [State.RUNNING.value, limit],
    )
    _archive(cursor, conn, cursor.fetchall())


def job_expire_claimed(refs: Sequence[LeaseRef], *, using: str = "default") -> set[str]:
    """Archive the just-claimed jobs among ``refs`` already past their deadline (without
    running them or charging an attempt); their ids."""
    if not refs:
        return set()
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        return archive_held_past_deadline(cursor, conn, refs)


def archive_held_past_deadline(
    cursor: Any, conn: BaseDatabaseWrapper, refs: Sequence[LeaseRef]
) -> set[str]:
    """Inside the caller's transaction: archive the jobs still held under ``refs`` whose
    deadline has passed; their ids. A job no longer held is left alone."""
    if not refs:
        return set()
    # No condition on state: a matching lease means running (the table's CHECK), and with
    # one the planner may read every running job through the lease index (store.fenced).
    cursor.execute(
        f"SELECT {_READ}, {v.now(conn)}, lease_id, fence FROM {v.jobs_by_id(conn)} "
        f"WHERE id IN ({v.placeholders(len(refs))}) "
        f"AND deadline IS NOT NULL AND deadline <= {v.now(conn)}{v.for_update(conn)}",
        [r.job_id for r in refs],
    )
    held = {(r.job_id, r.lease_id, r.fence) for r in refs}
    rows = [row[:9] for row in cursor.fetchall() if (row[0], row[9], row[10]) in held]
    _archive(cursor, conn, rows)
    return {row[0] for row in rows}


def _archive(cursor: Any, conn: BaseDatabaseWrapper, rows: Sequence[Sequence[Any]]) -> None:
    """Archive each locked row (as :data:`_READ` plus the store clock), one attempt entry
    each; the finishing hooks (workflows, death handlers) run in the same transaction."""
    deaths = []
    for job_id, state, errors, attempt, _, deadline, kind, queue, at in rows:
        check(state, Event.DEADLINE)
        message = f"deadline {v.parse_instant(conn, deadline).isoformat()} passed"
        entry = error_entry(conn, at, attempt + 1, REASON, message, None)
        deaths.append(Death(job_id, kind, queue, REASON, message))
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, errors = %s, finalized_at = {v.now(conn)}, "
            f"expires_at = {v.plus_duration_column(conn, 'retention')}, "
            "lease_id = NULL, lease_expires_at = NULL WHERE id = %s",
            [State.ARCHIVED.value, prep(conn, "errors", append_error(errors, entry)), job_id],
        )
    if rows:
        after_finish(cursor, conn, {row[0]: row[4] for row in rows})
        after_archive(cursor, conn, deaths)

"""The records a workflow leaves beside its jobs: its checkpoint, signal emissions and
graft decisions, and when they go.

A workflow's jobs are evicted by retention like any others, and its id is then free, as a
job's is. These records are kept a while longer: the checkpoint is the evidence a link in
a parent workflow reads when the child it waits for succeeded and was evicted before the
link began to watch (:mod:`headgate_django.workflows.internal`). Two rules bound them:

- A new workflow of the same id starts from nothing. Every record of the earlier workflow
  was written before the new coordinator job was enqueued, every record of the new one
  after, so records older than the coordinator are the earlier workflow's: readers pass
  over them and :func:`workflow_forget_earlier` deletes them. Inherited, they made the new
  workflow finish at once with its nodes never run, and swallowed its signals as repeats.
- :func:`workflow_records_prune` (the ``workflows-prune`` duty) deletes the records of a
  workflow whose coordinator job is gone and whose checkpoint was last written more than
  ``HEADGATE["WORKFLOW_RETENTION"]`` ago. Nothing else ever deleted them. A workflow
  cancelled (or otherwise finished) before its coordinator's first tick has no checkpoint
  to be found by: :func:`workflow_records_prune_without_checkpoint`, the same duty's
  second half, deletes its signal emissions and graft records once each is that old.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Model, Subquery

from headgate_django.models import Graft, Job, SignalEmission, WorkflowCheckpoint
from headgate_django.store import vendor as v
from headgate_django.store.workflows import coordinator_job_id

#: Each model of workflow records, with the field holding when its row was written (each
#: indexed, for the prune below).
_RECORDS: tuple[tuple[type[Model], str], ...] = (
    (WorkflowCheckpoint, "updated_at"),
    (SignalEmission, "emitted_at"),
    (Graft, "decided_at"),
)


def is_earlier(written: datetime | None, coordinator_enqueued_at: datetime | None) -> bool:
    """Whether a record written at ``written`` is an earlier workflow's: the workflow now
    under its id was enqueued after it."""
    if written is None or coordinator_enqueued_at is None:
        return False
    return written < coordinator_enqueued_at


def workflow_forget_earlier(workflow_id: str, *, using: str = "default") -> None:
    """Delete the records an earlier workflow of this id left (none while the id's
    coordinator job is absent: they may still be evidence)."""
    enqueued = Subquery(
        Job.objects.using(using)
        .filter(pk=coordinator_job_id(workflow_id))
        .values("enqueued_at")[:1]
    )
    with transaction.atomic(using=using):
        for model, written in _RECORDS:
            model._default_manager.using(using).filter(
                workflow_id=workflow_id, **{f"{written}__lt": enqueued}
            ).delete()


def workflow_records_prune(
    *, older_than: timedelta, limit: int = 500, using: str = "default"
) -> list[str]:
    """Delete the records of at most ``limit`` workflows whose coordinator job is gone
    and whose checkpoint was last written more than ``older_than`` ago; return their ids.

    Read through the checkpoint's ``updated_at`` index, oldest first, so a pass reads the
    lapsed checkpoints and not the table. A coordinator that is back (a new workflow of the
    id) keeps the records out; the new workflow's first tick deletes them instead. Only
    records written before the read are deleted: a new workflow of the id enqueued since
    writes its own after it, and they stay.
    """
    conn = v.connection_for(using)
    cutoff_ms = -int(older_than.total_seconds() * 1000)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT c.workflow_id, {v.now(conn)} FROM headgate_workflow_checkpoint c "
            f"WHERE c.updated_at < {v.cutoff(conn, offset=True)} AND NOT EXISTS "
            "(SELECT 1 FROM headgate_job j WHERE j.id = c.coordinator_job_id) "
            f"ORDER BY c.updated_at LIMIT %s{v.skip_locked(conn)}",
            [cutoff_ms, limit],
        )
        rows = cursor.fetchall()
        if not rows:
            return []
        ids = [row[0] for row in rows]
        read_at = v.parse_instant(conn, rows[0][1])
        for model, written in _RECORDS:
            model._default_manager.using(using).filter(
                workflow_id__in=ids, **{f"{written}__lt": read_at}
            ).delete()
    return ids


def workflow_records_prune_without_checkpoint(
    *, older_than: timedelta, limit: int = 500, using: str = "default"
) -> int:
    """Delete at most ``limit`` signal emissions and graft records written more than
    ``older_than`` ago by workflows that have no checkpoint and whose coordinator job is
    gone; return how many.

    Such a workflow finished before its coordinator's first tick (cancelled, say), so
    :func:`workflow_records_prune`, which finds workflows through their checkpoints, never
    sees it. Each table is read through the index on its time column, oldest first, each
    row's checkpoint and coordinator probed by primary key: a pass reads the lapsed rows,
    not the table. Row by row rather than workflow by workflow: with its coordinator gone
    the workflow takes no new signal, and the new workflow of a reused id passes over the
    rows older than its coordinator and deletes them itself.
    """
    conn = v.connection_for(using)
    cutoff_ms = -int(older_than.total_seconds() * 1000)
    coordinator = v.concat(conn, "r.workflow_id", "':coordinator'")
    deleted = 0
    with transaction.atomic(using=using), conn.cursor() as cursor:
        for model, written in _RECORDS[1:]:  # all but the checkpoint
            table = model._meta.db_table
            if deleted >= limit:
                break
            cursor.execute(
                f"SELECT r.id FROM {table} r WHERE r.{written} < {v.cutoff(conn, offset=True)} "
                "AND NOT EXISTS (SELECT 1 FROM headgate_workflow_checkpoint c "
                "WHERE c.workflow_id = r.workflow_id) AND NOT EXISTS "
                f"(SELECT 1 FROM headgate_job j WHERE j.id = {coordinator}) "
                f"ORDER BY r.{written} LIMIT %s{v.skip_locked(conn)}",
                [cutoff_ms, limit - deleted],
            )
            ids = [row[0] for row in cursor.fetchall()]
            if ids:
                cursor.execute(f"DELETE FROM {table} WHERE id IN ({v.placeholders(len(ids))})", ids)
                deleted += len(ids)
    return deleted

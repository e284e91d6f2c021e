"""Repair of an execution whose Operation job vanished (the reconcile duty's third task).

An Operation's job is inserted in the transaction that records its ``OperationScheduled``,
and its outcome reaches history before retention may evict the row, so a scheduled
Operation with neither an outcome in history nor a job row lost its job to something
outside the runtime: a hand-made ``DELETE``, or the generic job verbs of an older version.
Its execution waits for that outcome for ever, and an operator's ``resolve_uncertain`` finds
nothing to decide. Repair puts the job back, by its execution key, as the runtime would
have left it, so nothing is lost and nothing runs twice:

- an Operation that history shows uncertain and undecided is restored ``archived`` with the
  uncertain note: it still waits for the operator's decision, which now finds its job;
- any other is restored runnable and runs again with the same ``ctx.execution_key``, as
  after a crashed worker (a missing row cannot tell "never ran" from "ran and was lost",
  the same doubt a crash leaves, and the one the execution key settles downstream).

Recording a failure instead would lose an effect that may have happened, or fail a
workflow whose Operation never ran.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count

from headgate_django.envelope import Envelope, internal
from headgate_django.kernel.replay_events import (
    OPERATION_COMPLETED,
    OPERATION_FAILED,
    OPERATION_SCHEDULED,
    OPERATION_UNCERTAIN,
    OPERATION_UNCERTAIN_RESOLVED,
)
from headgate_django.kernel.states import State
from headgate_django.models import DURABLE_LIVE, HistoryEvent, Job
from headgate_django.store import vendor as v
from headgate_django.store.durable_history import EXEC_TABLE, lock_execution
from headgate_django.store.durable_jobs import OP_KIND, group_of
from headgate_django.store.fenced import error_entry
from headgate_django.store.insert import _insert, _plan, job_insert_many
from headgate_django.store.rows import prep

OPERATION_OUTCOMES = (OPERATION_COMPLETED, OPERATION_FAILED)

_MS = timedelta(milliseconds=1)
#: What the restored job of an undecided uncertain Operation says it is waiting for.
RESTORED_REASON = "its job vanished while it was uncertain; restored for an operator's decision"


@dataclass(frozen=True)
class VanishedOperation:
    """A scheduled Operation of a live execution with no outcome and no job."""

    execution_id: str
    task_queue: str
    command_id: str
    name: str
    version: str
    input: Any
    execution_key: str


def operation_find_vanished(
    *, idle_for: timedelta, after: str = "", limit: int, using: str = "default"
) -> tuple[list[VanishedOperation], str]:
    """The vanished Operations of up to ``limit`` live executions idle for ``idle_for``,
    taken by id after ``after``; and where the next sweep starts ("" once it wrapped).

    Each call reads a bounded slice, so a deployment with many waiting executions pays for
    ``limit`` of them per run, not all of them; only an execution whose scheduled
    Operations outnumber its outcomes and job rows has its OperationScheduled events read.
    """
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT id, task_queue FROM {EXEC_TABLE} WHERE state IN (%s, %s) AND id > %s AND updated_at "
            f"<= {v.cutoff(conn, offset=True)} ORDER BY id LIMIT %s",
            [*DURABLE_LIVE, after, -(idle_for // _MS), limit],
        )
        queues = dict(cursor.fetchall())
    ids = list(queues)
    if not ids:
        return [], ""
    history = HistoryEvent.objects.using(using).filter(execution_id__in=ids)
    scheduled = dict(
        history.filter(type=OPERATION_SCHEDULED)
        .values("execution_id")
        .annotate(n=Count("pk"))
        .values_list("execution_id", "n")
    )
    known = _known_keys(ids, using)
    short = [i for i in ids if scheduled.get(i, 0) > len(known.get(i, ()))]
    vanished = []
    rows = history.filter(execution_id__in=short, type=OPERATION_SCHEDULED).order_by(
        "execution_id", "seq"
    )
    for execution_id, payload in rows.values_list("execution_id", "payload"):
        if payload["execution_key"] not in known.get(execution_id, ()):
            vanished.append(_vanished(execution_id, queues[execution_id], payload))
    return vanished, ids[-1] if len(ids) == limit else ""


def _known_keys(ids: list[str], using: str) -> dict[str, set[str]]:
    """Per execution, the execution keys that have an outcome in history or a job row."""
    known: dict[str, set[str]] = {i: set() for i in ids}
    # Only Operation outcomes: an accepted update's fact key names no Operation.
    facts = HistoryEvent.objects.using(using).filter(
        execution_id__in=ids, fact_key__isnull=False, type__in=OPERATION_OUTCOMES
    )
    for execution_id, key in facts.values_list("execution_id", "fact_key"):
        known[execution_id].add(key or "")
    groups = {group_of(i): i for i in ids}
    jobs = Job.objects.using(using).filter(workflow_id__in=list(groups), kind=OP_KIND)
    for group, key in jobs.values_list("workflow_id", "id"):
        known[groups[group or ""]].add(key)
    return known


def _vanished(execution_id: str, task_queue: str, payload: dict[str, Any]) -> VanishedOperation:
    return VanishedOperation(
        execution_id=execution_id,
        task_queue=task_queue,
        command_id=payload["command_id"],
        name=payload["name"],
        version=payload["version"],
        input=payload.get("input"),
        execution_key=payload["execution_key"],
    )


def operation_restore(
    vanished: VanishedOperation, envelope: Envelope, *, using: str = "default"
) -> str | None:
    """Put back the job of ``vanished`` from ``envelope`` (its Operation job as a pass would
    enqueue it), under the execution's lock. Returns ``"uncertain"`` (restored for an
    operator's decision), ``"rerun"`` (runnable again), or None when there was nothing to
    repair any more (the execution ended, or the job or its outcome came back meanwhile)."""
    key = vanished.execution_key
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        locked = lock_execution(cursor, conn, vanished.execution_id)
        if locked is None or locked.state not in DURABLE_LIVE:
            return None
        history = HistoryEvent.objects.using(using).filter(execution_id=vanished.execution_id)
        if (
            Job.objects.using(using).filter(pk=key).exists()
            or history.filter(fact_key=key).exists()
        ):
            return None
        if not _undecided_uncertain(history, vanished.command_id):
            job_insert_many([envelope], using=using)
            return "rerun"
        _insert(conn, _plan([internal(replace(envelope, pending=True))]))
        marked = {"durable": {"state": "uncertain", "reason": RESTORED_REASON}}
        cursor.execute(f"SELECT {v.now(conn)}", [])  # error_entry reads the driver's value
        entry = error_entry(conn, cursor.fetchone()[0], 1, "uncertain", RESTORED_REASON, None)
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, checkpoint = %s, errors = %s, "
            f"finalized_at = {v.now(conn)}, expires_at = NULL WHERE id = %s",
            [
                State.ARCHIVED.value,
                prep(conn, "checkpoint", marked),
                prep(conn, "errors", [entry]),
                key,
            ],
        )
    return "uncertain"


def _undecided_uncertain(history: Any, command_id: str) -> bool:
    """Whether history holds an ``OperationUncertain`` of ``command_id`` not yet resolved."""
    marks = history.filter(type__in=[OPERATION_UNCERTAIN, OPERATION_UNCERTAIN_RESOLVED])
    balance = 0
    for kind, payload in marks.values_list("type", "payload"):
        if payload.get("command_id") == command_id:
            balance += 1 if kind == OPERATION_UNCERTAIN else -1
    return balance > 0

"""The jobs of the durable runtime: one workflow task per execution, one job per Operation.

The **workflow task** (kind ``headgate:durable-task``) has the id ``<execution>:task``, so an
execution has at most one and at most one replay pass runs at a time. It lives as long as
the execution: between passes it waits ``scheduled`` (for a timer, or a long re-check when
only a fact can wake it). A wake-up makes it ``available`` now; if it is ``running``, its
``scheduled_at`` moves past its ``claimed_at`` and the snooze that ends the pass honours
that by running it again at once (see ``job_snooze``). Wakers lock the execution header
first, and a pass commits under the same lock, so no wake-up is lost in between.

An **Operation job** (kind ``headgate:durable-op``) has its execution key as id, so a pass
retried after a crash finds the job it already enqueued. Its outcome reaches history in
the transaction that finishes the job: the ``ON_FINISH`` hook
(:mod:`headgate_django.durable.handlers`) calls :func:`settle_finished_operations`, which
records the fact and wakes the workflow task (lock order everywhere: Operation job,
header, workflow task).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Concat

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope, encode_call, internal
from headgate_django.exceptions import InvalidTransitionError, LeaseLostError, NotFoundError
from headgate_django.kernel.names import DURABLE_GROUP_PREFIX, DURABLE_OP_KIND, DURABLE_TASK_KIND
from headgate_django.kernel.replay_events import (
    OPERATION_COMPLETED,
    OPERATION_FAILED,
    OPERATION_UNCERTAIN,
    OPERATION_UNCERTAIN_RESOLVED,
)
from headgate_django.kernel.states import State
from headgate_django.models import LIVE_JOB_STATES, Execution, HistoryEvent, Job
from headgate_django.store import vendor as v
from headgate_django.store.claim import ClaimedJob, new_lease_id
from headgate_django.store.durable_history import (
    HISTORY_TABLE,
    NewEvent,
    append_fact,
    lock_execution,
)
from headgate_django.store.durable_runs import command_of, run_of
from headgate_django.store.fenced import (
    Completion,
    LeaseRef,
    append_error,
    error_entry,
    job_complete_many,
    lock_held,
)
from headgate_django.store.insert import insert_new, job_insert_many
from headgate_django.store.rows import RowReader, prep
from headgate_django.store.tracing import job_trace_stamp

TASK_KIND = DURABLE_TASK_KIND
OP_KIND = DURABLE_OP_KIND
GROUP_PREFIX = DURABLE_GROUP_PREFIX
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})

_FINISHED = [
    State.COMPLETED.value,
    State.ARCHIVED.value,
    State.CANCELLED.value,
    State.UNDECODABLE.value,
    State.QUARANTINED.value,
]
#: Operation job rows must outlive their ack: the hook reads the result from them.
_MIN_OP_RETENTION = timedelta(hours=1)


def task_job_id(execution_id: str) -> str:
    return f"{execution_id}:task"


def execution_of_task(job_id: str) -> str:
    """The execution whose workflow task has the id ``job_id`` (:func:`task_job_id`)."""
    return job_id.removesuffix(":task")


def group_of(execution_id: str) -> str:
    return f"{GROUP_PREFIX}{execution_id}"


def task_envelope(execution_id: str, task_queue: str) -> Envelope:
    return internal(
        Envelope(
            kind=TASK_KIND,
            id=task_job_id(execution_id),
            payload=encode_call((), {"execution_id": execution_id}),
            queue=task_queue,
            workflow_id=group_of(execution_id),
        )
    )


def operation_envelope(
    execution_id: str,
    *,
    command_id: str,
    name: str,
    version: str,
    input: Any,
    execution_key: str,
    queue: str,
    max_attempts: int,
) -> Envelope:
    call = {"execution_id": execution_id, "command_id": command_id, "name": name}
    call.update(version=version, input=input)
    return internal(
        Envelope(
            kind=OP_KIND,
            id=execution_key,
            payload=encode_call((), call),
            queue=queue,
            max_attempts=max_attempts,
            retention=max(headgate_settings.RETENTION, _MIN_OP_RETENTION),
            workflow_id=group_of(execution_id),
        )
    )


# -- the workflow task ---------------------------------------------------------------


def _after_claim(conn: Any) -> str:
    """``max(now, claimed_at + 1 ms)``: a wake of a running task must land strictly after
    its claim even within one tick of a millisecond clock (SQLite)."""
    if conn.vendor == "postgresql":
        return "GREATEST(clock_timestamp(), claimed_at + interval '1 millisecond')"
    if conn.vendor == "mysql":
        return "GREATEST(UTC_TIMESTAMP(6), claimed_at + INTERVAL 1000 MICROSECOND)"
    after = v.sqlite_instant("claimed_at", "'+0.001 seconds'")
    return f"MAX({v.sqlite_instant()}, {after})"


def task_wake(
    cursor: Any, conn: Any, execution_id: str, task_queue: str, *, reset_attempts: bool = False
) -> None:
    """Make the execution's workflow task run (again) now. Call with the header locked.

    A task backing off after a replay error keeps its backoff (the next pass reads every
    fact anyway); a missing or finished one is revived, so a running execution always has
    a task after this.
    """
    job_id = task_job_id(execution_id)
    s = State
    # scheduled_at first: MySQL evaluates SET assignments left to right on the new values.
    cursor.execute(
        f"UPDATE headgate_job SET scheduled_at = CASE WHEN state = %s THEN {_after_claim(conn)} "
        f"WHEN state = %s THEN scheduled_at ELSE {v.now(conn)} END, "
        "state = CASE WHEN state IN (%s, %s) THEN %s ELSE state END"
        f"{', attempt = 0, crash_attempt = 0' if reset_attempts else ''} "
        "WHERE id = %s AND state IN (%s, %s, %s, %s)",
        [
            s.RUNNING.value,
            s.AVAILABLE.value,
            s.SCHEDULED.value,
            s.PENDING.value,
            s.AVAILABLE.value,
            job_id,
            s.SCHEDULED.value,
            s.PENDING.value,
            s.AVAILABLE.value,
            s.RUNNING.value,
        ],
    )
    if cursor.rowcount:
        return
    cursor.execute("SELECT state FROM headgate_job WHERE id = %s", [job_id])
    row = cursor.fetchone()
    if row is None:
        ids = job_insert_many([task_envelope(execution_id, task_queue)], using=conn.alias)
        job_trace_stamp(ids, using=conn.alias)
    elif row[0] == s.RETRYABLE.value and reset_attempts:
        cursor.execute("UPDATE headgate_job SET attempt = 0 WHERE id = %s", [job_id])
    elif row[0] not in (s.RETRYABLE.value, s.QUARANTINED.value):
        # Finished under an earlier life (archived after errors, cancelled by an operator):
        # a fresh set of attempts, as an operator retry would give it.
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, attempt = 0, crash_attempt = 0, "
            f"scheduled_at = {v.now(conn)}, finalized_at = NULL, expires_at = NULL WHERE id = %s",
            [s.AVAILABLE.value, job_id],
        )


def task_fence(cursor: Any, ref: LeaseRef, *, reset_attempts: bool) -> None:
    """Check (with its row lock) that the pass still holds the workflow task's lease, and
    after a committed pass forget the task's earlier failures and crashes.

    It also takes back the wake-ups that reached the running task (``scheduled_at`` moved
    past ``claimed_at``, see :func:`task_wake`): every waker appends to history under the
    header lock, and the pass's compare-and-set proved it read all of that history, so
    those wake-ups are answered. A pass that runs Operations eagerly would otherwise run
    once more for nothing each time it parks.
    """
    reset = "0" if reset_attempts else "attempt"
    cursor.execute(
        f"UPDATE headgate_job SET attempt = {reset}, "
        f"crash_attempt = {'0' if reset_attempts else 'crash_attempt'}, "
        "scheduled_at = claimed_at "
        "WHERE id = %s AND lease_id = %s AND fence = %s AND state = %s",
        [ref.job_id, ref.lease_id, ref.fence, State.RUNNING.value],
    )
    if cursor.rowcount != 1:
        raise LeaseLostError(f"lease on job {ref.job_id} was lost (fence {ref.fence})")


def operation_insert(conn: Any, envelopes: Sequence[Envelope]) -> None:
    """Enqueue a pass's Operation jobs. They cannot exist yet (a job is inserted in the
    transaction that records its OperationScheduled, and replay never schedules a recorded
    command again), so the enqueue's duplicate and quarantine checks are skipped: this is
    the hot path of every Operation. With tracing on they carry the pass's span. A pass may
    start more Operations than one enqueue call takes (``MAX_BATCH``): all are written."""
    job_trace_stamp(insert_new(conn, envelopes), using=conn.alias)


@dataclass(frozen=True)
class EagerLease:
    """Ask a pass to lease the Operation job ``job_id`` it enqueues to ``worker_id`` at once,
    so that worker runs it on the pass's thread instead of claiming it later."""

    job_id: str
    worker_id: str
    lease_ttl: timedelta


def operation_lease(
    cursor: Any, conn: Any, envelope: Envelope, eager: EagerLease
) -> ClaimedJob | None:
    """Lease the Operation job just inserted (``pending``) from ``envelope`` as a claim
    would: fresh lease, fence bumped, store-clock expiry. Return what the worker needs to
    run it; None when its queue is paused or governed by an admission policy (a concurrency
    ceiling, fairness, weights: only a claim applies those), and then it is made available
    for a claim. The lease is an ordinary one: renewed by its worker, and reclaimed after a
    crash like any other."""
    lease_id = new_lease_id(eager.worker_id)
    ttl_ms = int(eager.lease_ttl.total_seconds() * 1000)
    s = State
    claim = [s.RUNNING.value, lease_id, eager.worker_id[:255], ttl_ms]
    cursor.execute(
        f"UPDATE headgate_job SET state = %s, lease_id = %s, fence = fence + 1, "
        f"claimed_by = %s, claimed_at = {v.now(conn)}, lease_expires_at = {v.plus_ms(conn)} "
        "WHERE id = %s AND state = %s AND NOT EXISTS (SELECT 1 FROM headgate_queue_state qs "
        "WHERE qs.name = headgate_job.queue AND (qs.paused = %s OR qs.admission = %s))",
        [*claim, eager.job_id, s.PENDING.value, True, True],
    )
    if cursor.rowcount != 1:
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, scheduled_at = {v.now(conn)} "
            "WHERE id = %s AND state = %s",
            [s.AVAILABLE.value, eager.job_id, s.PENDING.value],
        )
        return None
    return ClaimedJob(
        ref=LeaseRef(job_id=eager.job_id, lease_id=lease_id, fence=1),  # inserted at fence 0
        kind=envelope.kind,
        queue=envelope.queue,
        payload=bytes(envelope.payload),
        schema_version=envelope.schema_version,
        attempt=0,
        crash_attempt=0,
        max_attempts=envelope.max_attempts or headgate_settings.MAX_ATTEMPTS,
        timeout=envelope.timeout,
        retention=envelope.retention
        if envelope.retention is not None
        else headgate_settings.RETENTION,
        checkpoint={},
        cursor=None,
        workflow_id=envelope.workflow_id,
    )


@contextlib.contextmanager
def operation_complete_in_pass(ref: LeaseRef, result: Any) -> Iterator[None]:
    """Complete an Operation's job (fenced) without recording its outcome in history: the
    ``with`` body, a replay pass joining this transaction, records it with the pass's own
    events. All or nothing; :class:`LeaseLostError` when the lease is gone."""
    with transaction.atomic():
        # No workflow id: the finish hook would record the outcome and wake the task.
        if not job_complete_many([Completion(ref, result)]):
            raise LeaseLostError(f"lease on job {ref.job_id} was lost (fence {ref.fence})")
        yield


def live_job_ids(execution_id: str, *, using: str = "default") -> list[str]:
    qs = Job.objects.using(using).filter(
        workflow_id=group_of(execution_id), state__in=LIVE_JOB_STATES
    )
    return sorted(qs.values_list("id", flat=True))


def jobs_left_by_cancels(*, limit: int, using: str = "default") -> list[str]:
    """Live jobs of cancelled executions, at most ``limit``: for the reconcile duty.

    A cancel commits the execution's end, then cancels its jobs in a second transaction
    (see ``execution_cancel``); a crash in between leaves them live: a parked workflow task
    would stay ``scheduled`` until the vacuum deletes the execution."""
    cancelled = Execution.objects.using(using).filter(state="cancelled")
    groups = cancelled.annotate(group=Concat(Value(GROUP_PREFIX), "id")).values("group")
    qs = Job.objects.using(using).filter(state__in=LIVE_JOB_STATES, workflow_id__in=groups)
    return sorted(qs.values_list("id", flat=True)[:limit])


# -- Operation outcomes --------------------------------------------------------------


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _marker(checkpoint: Any) -> dict[str, Any]:
    """The durable runtime's note on an Operation job (``uncertain``, ``failed``, …)."""
    marker = (_json(checkpoint) or {}).get("durable")
    return marker if isinstance(marker, dict) else {}


def _fact(job: dict[str, Any]) -> NewEvent | None:
    """The history fact a finished Operation job stands for; None while it is uncertain."""
    cid = command_of(job["id"])
    marker = _marker(job["checkpoint"])
    state = job["state"]
    if state == State.COMPLETED.value:
        payload = {"command_id": cid, "result": job["result"]}
        return NewEvent(OPERATION_COMPLETED, payload, fact_key=job["id"])
    if marker.get("state") == "uncertain":
        return None
    errors = _json(job["errors"]) or []
    last = errors[-1] if errors else {}
    if marker.get("state") == "failed":
        error = str(marker.get("error") or "the Operation failed")
    elif state == State.ARCHIVED.value and last.get("kind") == "skip":
        return NewEvent(OPERATION_COMPLETED, {"command_id": cid}, fact_key=job["id"])
    elif state == State.ARCHIVED.value:
        error = str(last.get("error") or "the Operation failed")
    else:
        error = f"the Operation's job is {state}: {last.get('error') or 'no error recorded'}"
    return NewEvent(OPERATION_FAILED, {"command_id": cid, "error": error}, fact_key=job["id"])


def settle_finished_operations(cursor: Any, conn: Any, execution_id: str) -> int:
    """Record the outcome of every finished Operation job of the execution's current run
    that history lacks, and wake its workflow task; return how many facts were appended."""
    locked = lock_execution(cursor, conn, execution_id)
    if locked is None or locked.state in TERMINAL:
        return 0
    columns = ("id", "state", "result", "errors", "checkpoint")
    cursor.execute(
        f"SELECT {', '.join(columns)} FROM headgate_job WHERE workflow_id = %s AND kind = %s "
        f"AND state IN ({v.placeholders(len(_FINISHED))}) AND NOT EXISTS (SELECT 1 FROM "
        f"{HISTORY_TABLE} h WHERE h.execution_id = %s AND h.fact_key = headgate_job.id) "
        "ORDER BY id",
        [group_of(execution_id), OP_KIND, *_FINISHED, execution_id],
    )
    reader = RowReader.get(conn, columns)
    events, waiting = [], []
    for job in (reader.read(row) for row in cursor.fetchall()):
        if run_of(job["id"]) != locked.run_id:
            continue  # an Operation of a run that ended: its outcome has no command to settle
        fact = _fact(job)
        if fact is None:
            waiting.append(job["id"])
        else:
            events.append(fact)
    if waiting:  # an operator decides an uncertain Operation: retention must not evict it
        cursor.execute(
            "UPDATE headgate_job SET expires_at = NULL "
            f"WHERE id IN ({v.placeholders(len(waiting))})",
            waiting,
        )
    if events:
        append_fact(cursor, conn, execution_id, locked, events)
        if locked.state == "running":
            task_wake(cursor, conn, execution_id, locked.task_queue)
    return len(events)


@dataclass(frozen=True)
class RerunStatus:
    """What a re-run of an Operation job must know before running the Operation again."""

    execution_state: str | None
    settled: bool
    uncertain: bool


def execution_state(execution_id: str, *, using: str = "default") -> str | None:
    """The execution's state, or None when it is gone: what an Operation's first attempt
    checks before running its effect (no outcome or uncertain mark can exist yet)."""
    return (
        Execution.objects.using(using)
        .filter(pk=execution_id)
        .values_list("state", flat=True)
        .first()
    )


def operation_rerun_status(
    execution_id: str, job_id: str, *, using: str = "default"
) -> RerunStatus:
    """``settled`` is also True for an Operation of a run that has ended: nothing waits for
    its outcome, so it must not run again."""
    header = Execution.objects.using(using).filter(pk=execution_id)
    state, run_id = header.values_list("state", "run_id").first() or (None, "")
    settled = HistoryEvent.objects.using(using).filter(execution_id=execution_id, fact_key=job_id)
    checkpoint = Job.objects.using(using).filter(pk=job_id).values_list("checkpoint", flat=True)
    return RerunStatus(
        execution_state=state,
        settled=run_of(job_id) != (run_id or execution_id) or settled.exists(),
        uncertain=_marker(checkpoint.first()).get("state") == "uncertain",
    )


def operation_mark_failed(ref: LeaseRef, *, error: str, using: str = "default") -> None:
    """Note (fenced) that this attempt failed the Operation for good; the job is then
    skipped by the worker and the hook records ``OperationFailed`` with ``error``."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        (checkpoint, _) = lock_held(cursor, conn, ref, "checkpoint")
        marked = {**(_json(checkpoint) or {}), "durable": {"state": "failed", "error": error}}
        cursor.execute(
            "UPDATE headgate_job SET checkpoint = %s WHERE id = %s",
            [prep(conn, "checkpoint", marked), ref.job_id],
        )


def operation_mark_uncertain(
    ref: LeaseRef,
    *,
    execution_id: str,
    command_id: str,
    reason: str,
    finish_job: bool,
    using: str = "default",
) -> None:
    """The Operation may or may not have had its effect: record ``OperationUncertain`` and
    suspend the execution for an operator, fenced on the attempt's lease.

    ``finish_job`` also archives the job now (StartToClose: its handler may never return);
    otherwise the handler skips it afterwards, and a crash in between re-runs nothing (the
    next attempt sees the note and skips).
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        checkpoint, errors, attempt, at = lock_held(
            cursor, conn, ref, "checkpoint, errors, attempt"
        )
        marked = {**(_json(checkpoint) or {}), "durable": {"state": "uncertain", "reason": reason}}
        if finish_job:
            entry = error_entry(conn, at, attempt + 1, "uncertain", reason, None)
            cursor.execute(
                f"UPDATE headgate_job SET state = %s, checkpoint = %s, errors = %s, "
                f"finalized_at = {v.now(conn)}, expires_at = NULL, lease_id = NULL, "
                "lease_expires_at = NULL WHERE id = %s",
                [
                    State.ARCHIVED.value,
                    prep(conn, "checkpoint", marked),
                    prep(conn, "errors", append_error(errors, entry)),
                    ref.job_id,
                ],
            )
        else:
            cursor.execute(
                "UPDATE headgate_job SET checkpoint = %s WHERE id = %s",
                [prep(conn, "checkpoint", marked), ref.job_id],
            )
        locked = lock_execution(cursor, conn, execution_id)
        if locked is None or locked.state in TERMINAL or run_of(ref.job_id) != locked.run_id:
            return  # nothing waits for it any more (the execution or its run ended)
        header = None
        if locked.state == "running":
            why = f"Operation job {ref.job_id} is uncertain: {reason}"
            header = {"state": "suspended", "suspended_reason": why}
        event = NewEvent(OPERATION_UNCERTAIN, {"command_id": command_id, "reason": reason})
        append_fact(cursor, conn, execution_id, locked, [event], header)


def operation_resolve(
    job_id: str, *, decision: str, result: Any = None, error: str = "", using: str = "default"
) -> None:
    """Apply an operator's decision to an uncertain Operation, atomically with its history
    and the wake-up: ``complete`` (with ``result``), ``fail`` (with ``error``) or ``retry``.

    Refuses, writing nothing, unless the Operation is uncertain right now. The execution
    resumes once none of its Operations is uncertain any more.
    """
    qs = Job.objects.using(using).filter(pk=job_id, kind=OP_KIND)
    group = qs.values_list("workflow_id", flat=True).first() or ""
    if not group.startswith(GROUP_PREFIX):
        raise NotFoundError(f"no durable Operation job {job_id}", id=job_id)
    execution_id = group[len(GROUP_PREFIX) :]
    cid = command_of(job_id)
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        locked = lock_execution(cursor, conn, execution_id)
        cursor.execute(
            f"SELECT state, checkpoint FROM headgate_job WHERE id = %s{v.for_update(conn)}",
            [job_id],
        )
        state, checkpoint = cursor.fetchone() or (None, None)
        if state != State.ARCHIVED.value or _marker(checkpoint).get("state") != "uncertain":
            raise InvalidTransitionError(
                f"Operation job {job_id} is not uncertain (its job is {state})", state=state
            )
        if locked is None or locked.state in TERMINAL:
            raise InvalidTransitionError(
                f"execution {execution_id} is {locked.state if locked else 'gone'}",
                state=locked.state if locked else None,
            )
        if run_of(job_id) != locked.run_id:
            raise InvalidTransitionError(
                f"Operation job {job_id} belongs to a run of {execution_id} that has ended",
                state=locked.state,
            )
        events = [NewEvent(OPERATION_UNCERTAIN_RESOLVED, {"command_id": cid, "decision": decision})]
        if decision == "complete":
            payload = {"command_id": cid, "result": result}
            events.append(NewEvent(OPERATION_COMPLETED, payload, fact_key=job_id))
        elif decision == "fail":
            payload = {"command_id": cid, "error": error or "uncertain: fail"}
            events.append(NewEvent(OPERATION_FAILED, payload, fact_key=job_id))
        _apply_decision(cursor, conn, job_id, checkpoint, decision, result)
        header = None
        if locked.state == "suspended" and _uncertain_left(cursor, conn, execution_id) <= 1:
            header = {"state": "running", "suspended_reason": ""}
        append_fact(cursor, conn, execution_id, locked, events, header)
        if decision != "retry" and (header or locked.state == "running"):
            task_wake(cursor, conn, execution_id, locked.task_queue)


def _apply_decision(
    cursor: Any, conn: Any, job_id: str, checkpoint: Any, decision: str, result: Any
) -> None:
    if decision == "retry":
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, attempt = 0, crash_attempt = 0, "
            f"scheduled_at = {v.now(conn)}, finalized_at = NULL, expires_at = NULL, "
            "checkpoint = %s WHERE id = %s",
            [State.AVAILABLE.value, prep(conn, "checkpoint", {}), job_id],
        )
        return
    marked = {**(_json(checkpoint) or {}), "durable": {"state": "resolved", "decision": decision}}
    cursor.execute(
        f"UPDATE headgate_job SET checkpoint = %s, result = %s, "
        f"expires_at = {v.plus_duration_column(conn, 'retention')} WHERE id = %s",
        [prep(conn, "checkpoint", marked), prep(conn, "result", result), job_id],
    )


def _uncertain_left(cursor: Any, conn: Any, execution_id: str) -> int:
    """Uncertain Operations of the execution not yet resolved (before this resolution)."""
    kind = conn.ops.quote_name("type")
    cursor.execute(
        f"SELECT {kind}, COUNT(*) FROM {HISTORY_TABLE} WHERE execution_id = %s AND {kind} IN "
        f"(%s, %s) GROUP BY {kind}",
        [execution_id, OPERATION_UNCERTAIN, OPERATION_UNCERTAIN_RESOLVED],
    )
    counts = dict(cursor.fetchall())
    return int(counts.get(OPERATION_UNCERTAIN, 0)) - int(
        counts.get(OPERATION_UNCERTAIN_RESOLVED, 0)
    )

"""Store verbs of the durable runtime: executions, their history, signals, operator verbs.

Every verb that changes an execution locks its header row first and appends to history
with a compare-and-set on ``last_seq`` (the seq of the newest event), so appends are
contiguous and two writers can never both append at one seq. The header lock also orders
every writer that wakes the execution's workflow task (see :mod:`.durable_jobs`), so a
wake-up is either seen by the pass that is running or it re-runs the task afterwards.

Instants come from the store clock; history events appended by a replay pass carry the
store instant that pass read, because that is the time its replay used for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from headgate_django.envelope import Envelope, internal
from headgate_django.exceptions import (
    DefinitionError,
    IdConflictError,
    InvalidTransitionError,
    NotFoundError,
)
from headgate_django.kernel.replay_events import (
    SIGNAL_RECEIVED,
    WORKFLOW_CANCELLED,
    WORKFLOW_FAILED,
    WORKFLOW_RESUMED,
    WORKFLOW_STARTED,
    WORKFLOW_SUSPENDED,
    Event,
)
from headgate_django.kernel.states import State
from headgate_django.models import (
    DURABLE_LIVE,
    DURABLE_STATES,
    Execution,
    HistoryEvent,
    SignalInbox,
)
from headgate_django.store import durable_jobs as jobs
from headgate_django.store import vendor as v
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.durable_children import ChildStart, child_ended, children_insert
from headgate_django.store.durable_history import (
    EXEC_TABLE,
    HISTORY_TABLE,
    NewEvent,
    NewHeader,
    append,
    append_fact,
    history_append,
    history_load,
    insert_events,
    insert_header,
    lock_execution,
    payload_bytes,
    prep,
    read_rows,
    to_ms,
)
from headgate_django.store.durable_runs import NextRun, run_start_next, runs_vacuum
from headgate_django.store.effect_records import effects_delete_gone
from headgate_django.store.fenced import LeaseRef
from headgate_django.store.insert import job_insert_many
from headgate_django.store.tracing import job_trace_stamp

_MS = timedelta(milliseconds=1)

__all__ = [
    "Ending",
    "Header",
    "NewEvent",
    "NextRun",
    "execution_cancel",
    "execution_commit_pass",
    "execution_get",
    "execution_list",
    "execution_read",
    "execution_reconcile",
    "execution_resume",
    "execution_signal_with_start",
    "execution_start",
    "execution_suspend",
    "execution_vacuum",
    "history_append",
    "history_load",
    "signal_deliver",
]


@dataclass(frozen=True)
class Ending:
    """How a pass ends the execution: its terminal state and what to record on the header."""

    state: str
    result: Any = None
    failure_reason: str = ""


# -- reads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    """What a replay pass reads about its execution, with the store time of the read."""

    id: str
    name: str
    version: str
    state: str
    input: Any
    last_seq: int
    task_queue: str
    created_at: datetime
    #: The current run: its id (the execution's own id for the first run) and number.
    run_id: str
    run_number: int
    #: The current run's history size so far, and its size warning ("" until one is due).
    history_bytes: int
    history_warning: str
    now: datetime


_HEADER = (
    "id",
    "name",
    "version",
    "state",
    "input",
    "last_seq",
    "task_queue",
    "created_at",
    "run_id",
    "run_number",
    "history_bytes",
    "history_warning",
)


def execution_read(
    execution_id: str, *, after_seq: int = 0, lock: bool = False, using: str = "default"
) -> tuple[Header, list[Event]] | None:
    """The header, the store clock and the events after ``after_seq``, in one round trip
    (the start of every pass; one statement, so the events end at the header's last seq).

    ``lock`` first takes the header's row lock, held until the caller's transaction ends:
    then nothing can be appended until the pass reading it commits.
    """
    conn = v.connection_for(using)
    q = conn.ops.quote_name
    if lock:
        with conn.cursor() as cursor:
            lock_execution(cursor, conn, execution_id)
    columns = ", ".join(f"e.{q(c)}" for c in _HEADER)
    cursor_sql = (
        f"SELECT {columns}, {v.now(conn)}, h.seq, h.{q('type')}, h.payload, h.{q('at')} "
        f"FROM {EXEC_TABLE} e LEFT JOIN {HISTORY_TABLE} h ON h.execution_id = e.id "
        "AND h.seq > %s WHERE e.id = %s ORDER BY h.seq"
    )
    with conn.cursor() as cursor:
        cursor.execute(cursor_sql, [after_seq, execution_id])
        rows = cursor.fetchall()
    if not rows:
        return None
    width = len(_HEADER)
    (values,) = read_rows(conn, Execution, _HEADER, [rows[0][:width]])
    fields = dict(zip(_HEADER, values, strict=True))
    fields["run_id"] = fields["run_id"] or execution_id
    header = Header(**fields, now=v.parse_instant(conn, rows[0][width]))
    found = [r[width + 1 :] for r in rows if r[width + 1] is not None]
    events = read_rows(conn, HistoryEvent, ("seq", "type", "payload", "at"), found)
    return header, [Event(seq, kind, payload, to_ms(at)) for seq, kind, payload, at in events]


def execution_get(execution_id: str, *, using: str = "default") -> Execution | None:
    return Execution.objects.using(using).filter(pk=execution_id).first()


def execution_list(
    *,
    filters: dict[str, Any] | None = None,
    after: str | None = None,
    limit: int = 50,
    using: str = "default",
) -> list[Execution]:
    """A page of executions ordered by id; ``after`` is the last id of the previous page."""
    allowed = {"state", "name", "version", "task_queue", "business_idempotency_key"}
    if filters is not None and not isinstance(filters, Mapping):
        raise DefinitionError(f"filters must be a dict, not {type(filters).__name__}")
    unknown = sorted(set(filters or {}) - allowed)
    if unknown:
        raise DefinitionError(
            f"unknown execution filter(s) {', '.join(unknown)}; use {', '.join(sorted(allowed))}"
        )
    state = (filters or {}).get("state")
    if state is not None and state not in DURABLE_STATES:
        # A misspelt state would match nothing: an empty page that looks like an answer.
        raise DefinitionError(f"state must be one of {', '.join(DURABLE_STATES)}, not {state!r}")
    query = Q(**(filters or {}))
    if after is not None:
        query &= Q(pk__gt=after)
    return list(Execution.objects.using(using).filter(query).order_by("id")[:limit])


# -- start ---------------------------------------------------------------------------


def execution_start(
    *,
    execution_id: str,
    name: str,
    version: str,
    input: Any,
    seed: str,
    business_key: str | None,
    task_queue: str,
    meta: dict[str, Any],
    using: str = "default",
) -> tuple[str, bool]:
    """Insert the header, ``WorkflowStarted`` (seq 1) and the first workflow task, atomically.

    Returns ``(execution_id, deduplicated)``: a live execution of ``name`` holding
    ``business_key`` is returned instead of starting another one.
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        live = _live_with_key(name, business_key, using)
        if live is not None:
            return live, True
        if Execution.objects.using(using).filter(pk=execution_id).exists():
            raise IdConflictError(f"execution {execution_id} already exists", id=execution_id)
        header = NewHeader(execution_id, name, version, input, task_queue, business_key, meta)
        started = NewEvent(WORKFLOW_STARTED, {"input": input, "seed": seed})
        try:
            with transaction.atomic(using=using):
                insert_header(cursor, conn, header, history_bytes=payload_bytes([started]))
        except IntegrityError as exc:  # lost a race for the business key or the id
            live = _live_with_key(name, business_key, using)
            if live is not None:
                return live, True
            raise IdConflictError(f"execution {execution_id} already exists") from exc
        insert_events(cursor, conn, execution_id, 1, [started])
        job_trace_stamp(
            job_insert_many([jobs.task_envelope(execution_id, task_queue)], using=using),
            using=using,
        )
    return execution_id, False


def _live_with_key(name: str, key: str | None, using: str) -> str | None:
    if key is None:
        return None
    qs = Execution.objects.using(using).filter(name=name, business_idempotency_key=key)
    return qs.filter(state__in=DURABLE_LIVE).values_list("id", flat=True).first()


# -- one replay pass -----------------------------------------------------------------


def execution_commit_pass(
    ref: LeaseRef,
    *,
    execution_id: str,
    expected_seq: int,
    events: Sequence[NewEvent],
    operations: Sequence[Envelope],
    ending: Ending | None,
    next_timer_at: datetime | None = None,
    reset_attempts: bool = False,
    eager: jobs.EagerLease | None = None,
    history_warning: str | None = None,
    next_run: NextRun | None = None,
    waiting_on: dict[str, Any] | None = None,
    children: Sequence[ChildStart] = (),
    using: str = "default",
) -> ClaimedJob | None:
    """Record what one replay pass decided, in one transaction fenced twice.

    The append is a compare-and-set on ``expected_seq`` (the last seq the pass read), so
    a pass that raced another writer — a fact landing meanwhile, or a second pass —
    raises :class:`RevisionConflictError` and writes nothing; the workflow task's lease is
    checked too (:class:`LeaseLostError`). Operation jobs, whose id is their execution key,
    are enqueued with the ``OperationScheduled`` that names them, so one never exists
    without the other. ``next_timer_at`` is when the earliest timer the pass left unfired
    is due.

    With ``eager``, the named Operation job is leased to that worker in the same
    transaction (see :func:`.durable_jobs.operation_lease`) and returned for it to run.
    ``waiting_on`` is what a parked pass waits for (None otherwise), kept for operators.
    ``history_warning`` records the run's history-size warning; ``next_run`` ends the run
    (the events end with its ``WorkflowContinuedAsNew``) and starts the next one
    (:func:`.durable_runs.run_start_next`).
    ``children`` are inserted with the ``ChildStarted`` events among ``events``
    (:func:`.durable_children.children_insert`); an ``ending`` tells this execution's
    parent, if it has one.
    """
    conn = v.connection_for(using)
    header: dict[str, Any] = {"next_timer_at": next_timer_at, "waiting_on": waiting_on}
    if history_warning:
        header["history_warning"] = history_warning
    if ending is not None:
        header.update(
            state=ending.state,
            result=ending.result,
            failure_reason=ending.failure_reason,
            finished_at=None,
        )
    leased = None
    # savepoint=False: a pass folded with an Operation's outcome commits in the caller's
    # transaction, and a savepoint would only add two round trips.
    with transaction.atomic(using=using, savepoint=False), conn.cursor() as cursor:
        # The compare-and-set takes the header lock first, as every durable writer does.
        last = append(cursor, conn, execution_id, expected_seq, events, header, state="running")
        jobs.task_fence(cursor, ref, reset_attempts=reset_attempts)
        refused = children_insert(cursor, conn, execution_id, children, through_seq=expected_seq)
        if refused and next_run is None:
            append(cursor, conn, execution_id, last, refused)
            # Replay again at once with the refusals (children share the parent's queue).
            jobs.task_wake(cursor, conn, execution_id, children[0].task_queue)
        if next_run is not None:
            # A child the ended run could not start has nobody left to tell.
            run_start_next(
                cursor, conn, execution_id=execution_id, last_seq=last, next_run=next_run
            )
        if ending is not None:
            child_ended(
                cursor,
                conn,
                execution_id,
                state=ending.state,
                result=ending.result,
                reason=ending.failure_reason,
            )
        if eager is not None:
            # Inserted pending, not available: no other worker is woken up for it.
            operations = [internal(replace(e, pending=e.id == eager.job_id)) for e in operations]
        if operations:
            jobs.operation_insert(conn, operations)
        if eager is not None:
            envelope = next(e for e in operations if e.id == eager.job_id)
            leased = jobs.operation_lease(cursor, conn, envelope, eager)
    return leased


# -- signals -------------------------------------------------------------------------


def signal_deliver(
    execution_id: str,
    *,
    name: str,
    payload: Any,
    message_id: str | None,
    using: str = "default",
) -> bool:
    """Record a signal (inbox + ``SignalReceived``) and wake a running execution, atomically.

    Returns False when ``message_id`` was already delivered for ``name``. A terminal or
    suspended execution records the signal without a wake-up (resume wakes it).
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        locked = lock_execution(cursor, conn, execution_id)
        if locked is None:
            raise NotFoundError(f"execution {execution_id} does not exist", id=execution_id)
        if message_id is not None and (
            SignalInbox.objects.using(using)
            .filter(workflow_id=execution_id, name=name, message_id=message_id)
            .exists()
        ):
            return False
        event = {"name": name, "payload": payload}
        if message_id is not None:
            event["message_id"] = message_id
        seq = append_fact(cursor, conn, execution_id, locked, [NewEvent(SIGNAL_RECEIVED, event)])
        cursor.execute(
            "INSERT INTO headgate_durable_signal (workflow_id, name, message_id, payload, seq, "
            f"received_at) VALUES (%s, %s, %s, %s, %s, {v.now(conn)})",
            [execution_id, name, message_id, prep(SignalInbox, "payload", payload, conn), seq],
        )
        if locked.state == "running":
            jobs.task_wake(cursor, conn, execution_id, locked.task_queue)
    return True


def execution_signal_with_start(
    start: dict[str, Any],
    *,
    signal_name: str,
    payload: Any,
    message_id: str | None,
    using: str = "default",
) -> tuple[str, bool, bool]:
    """In one transaction: start the execution :func:`execution_start` describes unless a
    live one holds its business key, then deliver the signal to whichever it is. Returns
    ``(execution_id, started, delivered)``; ``delivered`` is False for a repeated
    ``message_id``."""
    with transaction.atomic(using=using):
        execution_id, deduplicated = execution_start(**start, using=using)
        delivered = signal_deliver(
            execution_id, name=signal_name, payload=payload, message_id=message_id, using=using
        )
    return execution_id, not deduplicated, delivered


# -- operator verbs ------------------------------------------------------------------


def execution_suspend(
    execution_id: str, *, reason: str, traceback: str | None = None, using: str = "default"
) -> None:
    """running → suspended: no replay until resumed. ``traceback`` (of the failure that
    suspended it) is kept in its ``WorkflowSuspended`` event."""
    _transition(execution_id, "suspended", reason=reason, traceback=traceback, using=using)


def execution_resume(execution_id: str, *, using: str = "default") -> None:
    """suspended → running, and wake the workflow task with a fresh replay budget."""
    _transition(execution_id, "running", using=using)


def execution_cancel(execution_id: str, *, reason: str, using: str = "default") -> list[str]:
    """Any live state → cancelled; return the ids of its live jobs (the caller cancels them).

    The jobs are cancelled in a second transaction by the caller: a finishing Operation job
    locks its row before the header, so taking both here could deadlock with it.
    """
    _transition(execution_id, "cancelled", reason=reason, using=using)
    return jobs.live_job_ids(execution_id, using=using)


def _transition(
    execution_id: str, target: str, *, reason: str = "", traceback: str | None = None, using: str
) -> None:
    allowed = {"suspended": ("running",), "running": ("suspended",), "cancelled": DURABLE_LIVE}
    why = {"reason": reason} if traceback is None else {"reason": reason, "traceback": traceback}
    event = {
        "suspended": NewEvent(WORKFLOW_SUSPENDED, why),
        "running": NewEvent(WORKFLOW_RESUMED, {}),
        "cancelled": NewEvent(WORKFLOW_CANCELLED, {"reason": reason}),
    }[target]
    header: dict[str, Any] = {"state": target}
    if target == "suspended":
        header["suspended_reason"] = reason
    elif target == "running":
        header["suspended_reason"] = ""
    else:
        header.update(failure_reason=reason, finished_at=None, next_timer_at=None)
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        locked = lock_execution(cursor, conn, execution_id)
        if locked is None:
            raise NotFoundError(f"execution {execution_id} does not exist", id=execution_id)
        state, last_seq, task_queue = locked.state, locked.last_seq, locked.task_queue
        if state not in allowed[target]:
            raise InvalidTransitionError(
                f"execution {execution_id} is {state}; only a "
                f"{' or '.join(allowed[target])} execution can become {target}",
                state=state,
            )
        append(cursor, conn, execution_id, last_seq, [event], header)
        if target == "running":
            jobs.task_wake(cursor, conn, execution_id, task_queue, reset_attempts=True)
        elif target == "cancelled":
            child_ended(cursor, conn, execution_id, state=target, reason=reason)


def execution_fail_dead_task(cursor: Any, conn: Any, execution_id: str, reason: str) -> bool:
    """Fail a live execution whose workflow task will never run again, with ``reason``, in
    the caller's transaction (the one that archived the task or marked it undecodable, see
    ``store.hooks.ON_ARCHIVE``); whether it did. Nothing else would ever replay it: the
    generic job verbs refuse the runtime's own jobs, and the reconcile duty would only wake
    the same dead task. Failed, the execution shows its reason, and its waiters and its
    parent (told here, as for a failure the workflow code raised) see it end.

    A crash quarantine does not come here: it leaves the execution running until an
    operator releases the task, which then replays it (see ``docs/durable.md``)."""
    locked = lock_execution(cursor, conn, execution_id)
    if locked is None or locked.state not in DURABLE_LIVE:
        return False  # ended (or vacuumed) already: the task's end is no news
    header = {
        "state": "failed",
        "failure_reason": reason,
        "finished_at": None,
        "next_timer_at": None,
        "waiting_on": None,
    }
    event = NewEvent(WORKFLOW_FAILED, {"reason": reason})
    append(cursor, conn, execution_id, locked.last_seq, [event], header)
    child_ended(cursor, conn, execution_id, state="failed", reason=reason)
    return True


# -- maintenance ---------------------------------------------------------------------


def execution_vacuum(*, older_than: timedelta, limit: int, using: str = "default") -> list[str]:
    """Delete terminal executions finished more than ``older_than`` ago, with their history,
    signals, jobs and the jobs' effect records; return their ids."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        # In the order of the (state, finished_at) index, one state after another, so the
        # LIMIT stops at once: ordered by finished_at alone, a backlog of expired
        # executions was read and sorted whole for each batch (108 ms a batch of 100 among
        # 300,000 on PostgreSQL, against 0.2 ms).
        cursor.execute(
            f"SELECT id FROM {EXEC_TABLE} WHERE state IN (%s, %s, %s) AND finished_at <= "
            f"{v.cutoff(conn, offset=True)} ORDER BY state, finished_at "
            f"LIMIT %s{v.skip_locked(conn)}",
            [*sorted(jobs.TERMINAL), -(older_than // _MS), limit],
        )
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return []
        marks = v.placeholders(len(ids))
        runs_vacuum(cursor, conn, ids)
        cursor.execute(f"DELETE FROM headgate_durable_history WHERE execution_id IN ({marks})", ids)
        cursor.execute(f"DELETE FROM headgate_durable_signal WHERE workflow_id IN ({marks})", ids)
        groups = [jobs.group_of(i) for i in ids]
        cursor.execute(f"SELECT id FROM headgate_job WHERE workflow_id IN ({marks})", groups)
        job_ids = [row[0] for row in cursor.fetchall()]
        cursor.execute(f"DELETE FROM headgate_job WHERE workflow_id IN ({marks})", groups)
        effects_delete_gone(cursor, job_ids)
        cursor.execute(f"DELETE FROM {EXEC_TABLE} WHERE id IN ({marks})", ids)
    return ids


def execution_reconcile(
    *, stalled_for: timedelta, limit: int, using: str = "default"
) -> dict[str, list[str]]:
    """Defence in depth, for the duty: revive running executions idle for ``stalled_for``
    whose workflow task is gone or finished, and record the outcome of Operation jobs that
    finished without a hook (crash quarantine, bulk cancel). Returns what it touched.

    A quarantined workflow task counts as present: the wake would leave it as it is (only
    releasing the quarantine runs it again), so counted as missing such an execution would
    be "revived" on every sweep for nothing, and enough of them would fill the sweep's
    slice for good."""
    conn = v.connection_for(using)
    live = [*jobs.LIVE_JOB_STATES, State.QUARANTINED.value]
    task_id = v.concat(conn, "e.id", "':task'")
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id FROM {EXEC_TABLE} e WHERE e.state = %s AND e.updated_at <= "
            f"{v.cutoff(conn, offset=True)} AND NOT EXISTS (SELECT 1 FROM headgate_job j WHERE "
            f"j.id = {task_id} AND j.state IN ({v.placeholders(len(live))})) "
            "ORDER BY e.updated_at LIMIT %s",
            ["running", -(stalled_for // _MS), *live, limit],
        )
        stalled = [row[0] for row in cursor.fetchall()]
        lost = [State.QUARANTINED.value, State.CANCELLED.value]
        start = len(jobs.GROUP_PREFIX) + 1  # SUBSTR(workflow_id, start) is the execution id
        cursor.execute(
            "SELECT DISTINCT j.workflow_id FROM headgate_job j WHERE j.kind = %s AND j.state IN "
            f"(%s, %s) AND EXISTS (SELECT 1 FROM {EXEC_TABLE} e WHERE "
            "e.id = SUBSTR(j.workflow_id, %s) AND e.state IN (%s, %s)) AND NOT EXISTS (SELECT 1 "
            "FROM headgate_durable_history h WHERE h.fact_key = j.id AND "
            "h.execution_id = SUBSTR(j.workflow_id, %s)) LIMIT %s",
            [jobs.OP_KIND, *lost, start, *DURABLE_LIVE, start, limit],
        )
        unsettled = [row[0][len(jobs.GROUP_PREFIX) :] for row in cursor.fetchall()]
    revived = []
    for execution_id in stalled:
        with transaction.atomic(using=using), conn.cursor() as cursor:
            locked = lock_execution(cursor, conn, execution_id)
            if locked is not None and locked.state == "running":
                jobs.task_wake(cursor, conn, execution_id, locked.task_queue)
                revived.append(execution_id)
    settled = []
    for execution_id in unsettled:
        with transaction.atomic(using=using), conn.cursor() as cursor:
            if jobs.settle_finished_operations(cursor, conn, execution_id):
                settled.append(execution_id)
    return {"revived": revived, "settled": settled}

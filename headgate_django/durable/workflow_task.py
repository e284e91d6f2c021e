"""The workflow task: one replay pass of one execution, as an ordinary leased job.

A pass reads the header and the history (only what this process has not cached), reads
the store clock, fires due timers, replays the workflow function through the pure kernel,
and commits what the replay decided in one transaction fenced by the task's lease and by
a compare-and-set on the history (see ``store.durable.execution_commit_pass``). It then
ends the task (the execution ended) or snoozes it until its earliest timer; facts that
arrive meanwhile wake it (``store.durable_jobs``). A pass that parks on one Operation it
just scheduled may run it on this thread and replay again at once (``durable.eager``).

A task that fails (a replay error: nondeterminism, a corrupt history; or a crash: workflow
code raising what replay cannot turn into a failure, the store refusing what the pass
writes, a history it cannot decode, children it cannot close) is retried with the job
backoff ``DURABLE_TASK_ATTEMPTS`` times, then the execution is suspended with the error
(and a crash's traceback) for an operator to fix the cause and resume it. A worker that
lacks the execution's (name, version) leaves the task for one that has it, and says so in
its log and status.

A pass whose code continued as new ends the run and starts the next one in its own
transaction; the task then replays the new run at once, within the claim's eager budget
(a workflow that continues as new without waiting must not keep its thread for ever). A run whose history passes the
``DURABLE_HISTORY_WARN_*`` thresholds gets one warning (logged, and kept on the header).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django import metrics
from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.control import Snooze
from headgate_django.durable.budget import gives_up
from headgate_django.durable.children import (
    CONTINUED,
    check_child,
    close_children,
    close_children_of_ended_runs,
)
from headgate_django.durable.eager import FINISHED, adopted, attempt, eager_lease, record, spent
from headgate_django.durable.history_cache import histories
from headgate_django.durable.missing_code import MISSING_CODE_RETRY, missing_code
from headgate_django.durable.registry import (
    DEFAULT_OPERATION_ATTEMPTS,
    WorkflowDef,
    find_operation,
    find_workflow,
    registered_workflows,
)
from headgate_django.envelope import (
    Envelope,
    canonical_json,
    check_payload,
    check_payload_size,
    check_result,
    new_id,
)
from headgate_django.exceptions import (
    InvalidTransitionError,
    LeaseLostError,
    NondeterminismError,
    PayloadError,
    RevisionConflictError,
    exception_reason,
)
from headgate_django.kernel.replay import replay
from headgate_django.kernel.replay_events import (
    OPERATION_COMPLETED,
    TIMER_FIRED,
    WORKFLOW_RESUMED,
    Command,
    Completed,
    CompleteUpdate,
    ContinuedAsNew,
    Event,
    Failed,
    Nondeterministic,
    Parked,
    ScheduleOperation,
    StartChild,
    due_timers,
)
from headgate_django.kernel.replay_runs import history_size_warning
from headgate_django.kernel.storable import storable_text
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.durable import (
    Ending,
    Header,
    NewEvent,
    NextRun,
    execution_commit_pass,
    execution_suspend,
)
from headgate_django.store.durable_children import ChildStart
from headgate_django.store.durable_history import from_ms, payload_bytes, to_ms
from headgate_django.store.durable_jobs import (
    TERMINAL,
    operation_complete_in_pass,
    operation_envelope,
)
from headgate_django.store.durable_runs import command_of
from headgate_django.store.packet import check_json_sent, check_result_sent
from headgate_django.store.vendor import connection_for
from headgate_django.worker import execute

log = logging.getLogger("headgate_django.durable")

#: A parked execution that only a fact can wake is re-checked this often anyway.
PARK_RECHECK = timedelta(hours=1)
#: The end of a failed pass's traceback kept with its suspension (as a job's error record).
TRACEBACK_CHARS = 16_000
#: Passes in a row that may lose the race against facts landing before the task yields.
MAX_RACES = 20


@dataclass(frozen=True)
class _Continued:
    """A committed pass that ended its run and started the next one: replay that now."""


@dataclass(frozen=True)
class _Park:
    """A committed pass that waits: until ``wake_at`` (``time.monotonic()``; None: only a
    fact wakes it), after running ``eager`` here when the pass leased it."""

    wake_at: float | None
    eager: ClaimedJob | None


def workflow_task(ctx: JobContext, execution_id: str) -> dict[str, Any]:
    """The handler of kind ``headgate:durable-task`` (registered by :mod:`.handlers`).

    Every failure of the task counts against one budget (see :func:`_failed`), wherever it
    happens: in a replay pass, or in reading the history, closing children or running an
    eager Operation around it."""
    try:
        return _run(ctx, execution_id)
    except (Snooze, LeaseLostError):
        raise  # control flow; a task whose lease another worker now holds
    except BaseException as exc:  # not only Exception: see _failed
        _failed(ctx, execution_id, exc)
        raise


def _run(ctx: JobContext, execution_id: str) -> dict[str, Any]:
    since = time.monotonic()
    races = 0
    first = True
    while races < MAX_RACES:
        read = histories.read(execution_id)
        if read is None or read[0].state in TERMINAL:
            # Vacuumed, cancelled, or ended by an earlier pass whose ack was lost (then its
            # children may not have been closed yet).
            if read is not None:
                close_children(execution_id, read[0].state)
            return {"execution_id": execution_id, "state": read[0].state if read else None}
        header, history = read
        if first and header.run_number > 1 and (ctx.attempt > 1 or _resumed(history)):
            # The close that follows a continue-as-new may have been cut short: by a crash,
            # or by failures that suspended the execution (a resume resets the attempts).
            close_children_of_ended_runs(execution_id)
        first = False
        if header.state == "suspended":
            raise Snooze(PARK_RECHECK)  # Manager.resume wakes it
        definition = find_workflow(header.name, header.version)
        if definition is None:
            _leave_for_another_worker(header)
            raise Snooze(MISSING_CODE_RETRY)
        step: dict[str, Any] | _Park | _Continued | str
        try:
            step = _pass(ctx, header, history, definition, since=since)
        except RevisionConflictError:
            races += 1
            continue  # a fact landed while we replayed: replay again with it
        while isinstance(step, _Park) and step.eager is not None:
            park, step = step, _run_eagerly(ctx, execution_id, definition, step, since=since)
            if isinstance(step, str) and step not in FINISHED:
                raise _snooze(park.wake_at)  # it runs again later; its outcome wakes us
        if isinstance(step, dict):
            # After the pass's transaction (and an eager fold's) committed: a child's
            # writer locks the child before the parent, so this must not hold the parent.
            close_children(execution_id, step["state"])
            return step
        if isinstance(step, _Park):
            raise _snooze(step.wake_at)
        if isinstance(step, _Continued):
            # The ended run's children get their close policy before the next run starts any.
            close_children(execution_id, CONTINUED)
            if spent(since):
                raise Snooze(timedelta(milliseconds=1))  # run after run: give the thread back
        races = 0  # the Operation's outcome (or the new run) is in history: replay it
    raise Snooze(timedelta(milliseconds=1))  # busy execution: yield, come back at once


def _resumed(history: list[Event]) -> bool:
    """Whether the current run was resumed after a suspension."""
    return any(e.type == WORKFLOW_RESUMED for e in history)


class _Unfoldable(Exception):
    """An eager Operation's outcome cannot be recorded with the next pass: record it apart."""


def _run_eagerly(
    ctx: JobContext, execution_id: str, definition: WorkflowDef, park: _Park, *, since: float
) -> dict[str, Any] | _Park | _Continued | str:
    """Run the Operation job ``park`` leased to this worker, here. A success is recorded in
    the transaction of the pass that replays with it (one transaction per Operation, not
    two); that pass's result is returned. Any other outcome, or a success the pass cannot
    take, is recorded as any worker records it, and its label is returned."""
    job = park.eager
    assert job is not None and ctx.host is not None
    with adopted(ctx, job) as op_ctx:
        outcome = attempt(op_ctx, job)
        if isinstance(outcome, execute.Succeeded):
            try:
                step = _fold(ctx, execution_id, definition, job, outcome.result, since=since)
            except Exception:  # all rolled back: record the outcome on its own
                histories.forget(execution_id)
            else:
                ctx.host.count_outcome("completed", job.queue)
                return step
        label = record(job, outcome)
        ctx.host.count_outcome(label, job.queue)
        return label


def _fold(
    ctx: JobContext,
    execution_id: str,
    definition: WorkflowDef,
    job: ClaimedJob,
    result: Any,
    *,
    since: float,
) -> dict[str, Any] | _Park | _Continued:
    """Complete the Operation's job and run the next pass with its outcome, in one
    transaction. The lock order is the one of every durable writer: the Operation's job,
    the header (held while the pass replays, so nothing lands in between), the task."""
    with operation_complete_in_pass(job.ref, result):
        read = histories.read(execution_id, lock=True)
        if read is None or read[0].state != "running":
            raise _Unfoldable("the execution is not running")
        header, history = read
        cid = command_of(job.ref.job_id)
        payload = {"command_id": cid, "result": json.loads(json.dumps(result))}
        fact = NewEvent(OPERATION_COMPLETED, payload, fact_key=job.ref.job_id)
        return _pass(ctx, header, history, definition, since=since, fact=fact)


def _snooze(wake_at: float | None) -> Snooze:
    if wake_at is None:
        return Snooze(PARK_RECHECK)
    # The snooze counts from the store clock when it is written: take off the time spent.
    return Snooze(max(timedelta(seconds=wake_at - time.monotonic()), timedelta(milliseconds=1)))


def _leave_for_another_worker(header: Header) -> None:
    here = sorted(d.version for d in registered_workflows() if d.name == header.name)
    log.warning(
        "execution %s needs workflow %r version %r, which this worker does not have "
        "(it has %s); leaving its task for a worker that does",
        header.id,
        header.name,
        header.version,
        ", ".join(repr(v) for v in here) or "no version of it",
        extra={"execution_id": header.id, "workflow": header.name, "version": header.version},
    )
    missing_code.note("workflow", header.name, header.version, header.id)


def _pass(
    ctx: JobContext,
    header: Header,
    history: list[Event],
    definition: WorkflowDef,
    *,
    since: float,
    fact: NewEvent | None = None,
) -> dict[str, Any] | _Park | _Continued:
    """One replay pass. ``fact`` (an eager Operation's outcome, see ``_fold``) is recorded
    with the pass, after the timers already due; the pass then replays with it."""
    read_at = time.monotonic()
    now = header.now
    now_ms = to_ms(now)
    seq = header.last_seq
    fired = [
        Event(seq + n, TIMER_FIRED, {"command_id": cid}, now_ms)
        for n, cid in enumerate(due_timers(history, now_ms), start=1)
    ]
    if fact is not None:
        fired.append(Event(seq + len(fired) + 1, fact.type, fact.payload, now_ms))
    replayed = history + fired
    outcome = replay(
        definition.fn,
        header.input,
        replayed,
        workflow_id=header.id,
        run_id=header.run_id,
        now_ms=now_ms,
        check_child=check_child,
        updates=definition.update_handlers(),
    )
    if isinstance(outcome, Nondeterministic):
        if fact is not None:
            raise _Unfoldable("the pass does not replay")  # recorded apart, then retried
        raise outcome.error  # the task's budget (see _failed)
    outcome, operations = _checked(outcome, header, connection_for(ctx.using))
    events = [NewEvent(e.type, e.payload, at=now) for e in fired]
    if fact is not None:
        events[-1] = replace(fact, at=now)
    events += [NewEvent(c.event_type, c.event_payload(), at=now) for c in outcome.commands]
    ending = next_run = None
    if isinstance(outcome, ContinuedAsNew):
        next_run = _next_run(header, replayed, outcome)
        payload = {**outcome.event_payload(), "next_run_id": next_run.run_id}
        events.append(NewEvent(outcome.event_type, payload, at=now))
    if isinstance(outcome, Completed | Failed):
        events.append(NewEvent(outcome.event_type, outcome.event_payload(), at=now))
        ending = (
            Ending("succeeded", result=outcome.result)
            if isinstance(outcome, Completed)
            else Ending("failed", failure_reason=outcome.reason)
        )
    wake_at_ms = outcome.wake_at_ms if isinstance(outcome, Parked) else None
    eager = None
    if isinstance(outcome, Parked) and operations:
        scheduled = [c for c in outcome.commands if isinstance(c, ScheduleOperation)]
        eager = eager_lease(ctx, outcome, scheduled, operations, since=since)
    warning = _size_warning(header, seq + len(events), events) if next_run is None else None
    leased = execution_commit_pass(
        ctx.lease,
        execution_id=header.id,
        expected_seq=seq,
        events=events,
        operations=operations,
        ending=ending,
        next_timer_at=None if wake_at_ms is None else from_ms(wake_at_ms),
        reset_attempts=ctx.attempt > 1,
        eager=eager,
        history_warning=warning,
        next_run=next_run,
        waiting_on=outcome.waiting() if isinstance(outcome, Parked) else None,
        children=[
            ChildStart(c, uuid.uuid4().hex, header.task_queue)
            for c in outcome.commands
            if isinstance(c, StartChild)
        ],
    )
    if warning:
        log.warning("execution %s: %s", header.id, warning, extra={"execution_id": header.id})
    if next_run is not None:
        histories.forget(header.id)
        return _Continued()
    written = [Event(seq + n, e.type, e.payload, now_ms) for n, e in enumerate(events, start=1)]
    histories.store(header, [*history, *written])
    if ending is not None:
        metrics.observe_durable(ending.state)
        return {"execution_id": header.id, "state": ending.state}
    wake_at = None if wake_at_ms is None else read_at + (wake_at_ms - now_ms) / 1000
    return _Park(wake_at, leased)


def _next_run(header: Header, replayed: list[Event], outcome: ContinuedAsNew) -> NextRun:
    """The run that follows ``header``'s current one, with the signals it did not consume."""
    carried = [replayed[seq - 1] for seq in outcome.carried]
    return NextRun(
        at=header.now,
        run_id=new_id(),
        input=outcome.input,
        seed=uuid.uuid4().hex,
        carried=[NewEvent(e.type, e.payload) for e in carried],
        ended_run_id=header.run_id,
        ended_number=header.run_number,
        ended_input=header.input,
        ended_bytes=header.history_bytes,
    )


def _size_warning(header: Header, events: int, new: list[NewEvent]) -> str | None:
    """The run's history-size warning, when this pass is the first to pass a threshold."""
    if header.history_warning:
        return None  # once per run
    return history_size_warning(
        run_number=header.run_number,
        events=events,
        size=header.history_bytes + payload_bytes(new),
        max_events=headgate_settings.DURABLE_HISTORY_WARN_EVENTS,
        max_bytes=headgate_settings.DURABLE_HISTORY_WARN_BYTES,
    )


def _checked(
    outcome: Completed | Failed | ContinuedAsNew | Parked,
    header: Header,
    conn: BaseDatabaseWrapper,
) -> tuple[Completed | Failed | ContinuedAsNew | Parked, list[Envelope]]:
    """The outcome and its Operation jobs, refusing what cannot be stored (not JSON, an
    input over ``MAX_PAYLOAD_BYTES``, a result over ``MAX_RESULT_BYTES`` as an Operation's
    or an update's or one no database keeps (see ``_keepable``), or on MySQL/MariaDB too
    large for ``max_allowed_packet``) as a failure
    of the workflow: it is a bug in its code."""
    try:
        if isinstance(outcome, Completed):
            canonical_json(outcome.result)
            check_result_sent(conn, outcome.result, _keepable(outcome.result))
        mysql = conn.vendor == "mysql"  # a statement must fit max_allowed_packet
        if isinstance(outcome, ContinuedAsNew):
            # A new run's input is stored like a start's (see Client.start).
            data = check_payload(outcome.input, "input of continue_as_new")
            if mysql:
                check_json_sent(conn, outcome.input, len(data), "the input of continue_as_new")
        commands = [c for c in outcome.commands if isinstance(c, ScheduleOperation)]
        for command in commands:  # kept in OperationScheduled as well as in the job
            check_payload(command.input, f"input of {command.command_id} ({command.name})")
        operations = [operation_job(header.id, header.task_queue, c) for c in commands]
        for command, envelope in zip(commands, operations, strict=True) if mysql else ():
            what = f"the input of {command.command_id} ({command.name})"
            check_json_sent(conn, command.input, len(envelope.payload), what)
    except PayloadError as exc:
        return Failed(f"{type(exc).__name__}: {exc}", []), []
    return replace(outcome, commands=[_bounded(c, conn) for c in outcome.commands]), operations


def _bounded(command: Command, conn: BaseDatabaseWrapper) -> Command:
    """An update result over ``MAX_RESULT_BYTES`` (or on MySQL/MariaDB too large for
    ``max_allowed_packet``) fails the update, not the workflow: the caller asked for too
    much, the workflow did nothing wrong."""
    if isinstance(command, CompleteUpdate) and command.error is None:
        try:
            check_result_sent(conn, command.result, _keepable(command.result))
        except PayloadError as exc:
            return replace(command, result=None, error=f"{type(exc).__name__}: {exc}")
    return command


def _keepable(result: Any) -> int:
    """``check_result``, raising a :class:`PayloadError` for every result the store cannot
    keep: one holding a NUL character (PostgreSQL refuses it) or nested deeper than MariaDB
    takes would otherwise crash every attempt of the pass."""
    try:
        return check_result(result)
    except PayloadError:
        raise
    except (TypeError, ValueError) as exc:
        raise PayloadError(str(exc)) from exc


def operation_job(execution_id: str, task_queue: str, command: ScheduleOperation) -> Envelope:
    """The job of ``command`` in execution ``execution_id``, as a pass enqueues it (and as
    the reconcile duty puts back a vanished one)."""
    # A workflow-only worker may not have the Operation's code: defaults then, and the
    # Operation's own worker applies its definition when it runs it.
    definition = find_operation(command.name, command.version)
    attempts = definition.max_attempts if definition else DEFAULT_OPERATION_ATTEMPTS
    envelope = operation_envelope(
        execution_id,
        command_id=command.command_id,
        name=command.name,
        version=command.version,
        input=command.input,
        execution_key=command.execution_key,
        queue=(definition.queue if definition else None) or task_queue,
        max_attempts=max(attempts, headgate_settings.MAX_ATTEMPTS),
    )
    check_payload_size(len(envelope.payload), f"input of {command.command_id} ({command.name})")
    return envelope


def _failed(ctx: JobContext, execution_id: str, exc: BaseException) -> None:
    """A failed attempt of the task is retried with the job's backoff. On the last attempt
    of its budget (:mod:`.budget`) the execution is suspended with the error (and, but for a replay error,
    whose message names the mismatch, its traceback), and the task snoozes until resumed:
    archived at the job's ``MAX_ATTEMPTS``, it would fail the execution (see
    ``handlers._fail_executions_of_dead_tasks``) after hours of backoff, for what is most
    often a bug an operator can fix. That holds for every failure of the task, not only the
    replay pass's: an event the history cache cannot decode, a child the close policy cannot
    close, fail every attempt alike.

    A lost database connection is not the execution's failure, but counting it costs
    little: an attempt runs and its failure is recorded only while the store answers, so an
    outage fails the attempts that were running when it began (the worker runs such an
    attempt again, uncharged, on a new connection: those are not suspended) and the budget
    is spent only by a store that fails attempt after attempt across the backoff. While it
    cannot be reached, no suspension is written either (see ``_suspend``)."""
    histories.forget(execution_id)
    if not gives_up(ctx, exc):
        return
    if isinstance(exc, NondeterminismError):
        _suspend(execution_id, f"replay failed after {ctx.attempt} attempts: {exc}", exc, None)
    else:
        reason = f"the workflow task failed {ctx.attempt} times: {exception_reason(exc)}"
        _suspend(execution_id, reason, exc, "".join(traceback.format_exception(exc)))


def _suspend(execution_id: str, reason: str, exc: BaseException, trace: str | None) -> None:
    """Suspend the execution with ``reason`` (and ``trace``), then snooze the task until
    ``Manager.resume`` wakes it. Returns when there is nothing to suspend (the execution
    ended: what failed was the close of its children, which the job's own retries and the
    reconcile duty go on trying) or the store could not be reached: the job then records
    the failure itself."""
    try:
        execution_suspend(
            execution_id,
            reason=storable_text(reason[:4000]),
            traceback=None if trace is None else storable_text(trace[-TRACEBACK_CHARS:]),
        )
    except InvalidTransitionError as refused:
        if refused.details.get("state") == "suspended":
            raise Snooze(PARK_RECHECK) from exc  # suspended meanwhile: resume wakes it
        return
    except Exception:
        log.exception("execution %s: could not suspend it", execution_id)
        return
    log.error("execution %s suspended: %s", execution_id, reason, exc_info=exc if trace else None)
    raise Snooze(PARK_RECHECK) from exc

"""Operations: the only place where a durable workflow touches the world.

An Operation runs as an ordinary leased job (the worker renews its lease while it runs;
a lost lease cancels it and nothing it returns lands). Its outcome reaches history in
the same transaction that finishes the job (``store.durable_jobs``):

========================================  ==========================================
handler                                   outcome
========================================  ==========================================
returns a JSON value                      OperationCompleted(result)
raises ``Skip``                           OperationCompleted without a result
raises, attempts left                     retried after the Operation's retry delay
raises, attempts used up / ``Abort``      OperationFailed(error)
returns a value the store cannot keep     OperationFailed(error), at once
raises ``Snooze``                         runs again later, no attempt used
raises ``Uncertain`` / outlives timeout   OperationUncertain; execution suspended
========================================  ==========================================

An attempt that outlives its StartToClose timeout is *uncertain*, not retried: it may have
had its effect. A watchdog records that when the timeout elapses, even if the handler
never returns. ``ctx.execution_key`` is the same on every attempt: use it to make the
effect idempotent (side effects are at-least-once).

The runtime's own code failing around the handler (a re-run check, recording the
handler's failure or uncertainty) is retried ``DURABLE_TASK_ATTEMPTS`` times, as a failing
workflow task is, then the Operation is uncertain for an operator (:func:`operation_job`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connections

from headgate_django.context import JobContext
from headgate_django.control import Abort, RetryAfter, Skip, Snooze, Uncertain
from headgate_django.durable.budget import gives_up
from headgate_django.durable.missing_code import MISSING_CODE_RETRY, missing_code
from headgate_django.durable.registry import find_operation
from headgate_django.envelope import check_result
from headgate_django.exceptions import (
    LeaseLostError,
    ResultTooLargeError,
    exception_reason,
)
from headgate_django.kernel.storable import storable_text
from headgate_django.store.durable_jobs import (
    TERMINAL,
    RerunStatus,
    execution_state,
    operation_mark_failed,
    operation_mark_uncertain,
    operation_rerun_status,
)
from headgate_django.store.packet import check_result_sent
from headgate_django.store.vendor import connection_for

log = logging.getLogger("headgate_django.durable")


class OperationContext:
    """What an Operation receives: a stable identity for idempotent effects, and the
    attempt's cancellation (set when its lease is lost or its timeout elapsed)."""

    def __init__(self, job: JobContext, *, execution_id: str, command_id: str) -> None:
        self._job = job
        self.workflow_id = execution_id
        self.command_id = command_id

    @property
    def execution_key(self) -> str:
        """``<run id>:<command id>`` (the run id is the workflow id for the first run): the
        same on every attempt of this Operation."""
        return self._job.job_id

    @property
    def job_id(self) -> str:
        return self._job.job_id

    @property
    def attempt(self) -> int:
        """1 for the first attempt; failures and crashes both count."""
        return self._job.attempt

    @property
    def cancelled(self) -> bool:
        return self._job.cancelled

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early if the attempt is cancelled."""
        return self._job.wait_cancelled(timeout)


def operation_job(
    ctx: JobContext,
    execution_id: str,
    command_id: str,
    name: str,
    version: str,
    input: Any = None,
) -> Any:
    """The handler of kind ``headgate:durable-op`` (registered by :mod:`.handlers`).

    What the Operation's own code does follows its retry policy (:func:`_attempt` turns
    each outcome into one of the control-flow exceptions let through below). Anything
    else is the runtime's code failing around it: the re-run checks before it, recording
    its failure or its uncertainty after it. That fails every attempt alike, so it counts
    against the runtime's budget (:mod:`.budget`), as a failing workflow task does, then
    the Operation is made uncertain (:func:`_runtime_failed`)."""
    try:
        return _attempt(ctx, execution_id, command_id, name, version, input)
    except (Snooze, Skip, LeaseLostError, RetryAfter):
        raise
    except BaseException as exc:  # not only Exception: the worker fails the attempt for any
        _runtime_failed(ctx, execution_id, command_id, exc)
        raise


def _runtime_failed(
    ctx: JobContext, execution_id: str, command_id: str, exc: BaseException
) -> None:
    """Retry with the job's backoff until the budget is spent; then mark the Operation
    uncertain, which suspends its execution with the reason for an operator to decide
    (``Manager.resolve_uncertain``: retry, complete or fail). Whether its effect happened
    cannot be known from here (the failure may follow the handler), and recording a failure
    instead could fail a workflow whose Operation had its effect, or never ran. Archived
    at the job's ``MAX_ATTEMPTS`` instead, the Operation would fail after hours of backoff,
    the execution ``running`` meanwhile with no reason shown. When the mark cannot be
    written either, the job records the failure itself and is retried."""
    if not gives_up(ctx, exc):
        return
    error = exception_reason(exc)
    reason = storable_text(
        f"its job failed {ctx.attempt} times outside the Operation's code: {error}"[:2000]
    )
    try:
        operation_mark_uncertain(
            ctx.lease,
            execution_id=execution_id,
            command_id=command_id,
            reason=reason,
            finish_job=False,
        )
    except LeaseLostError:
        raise
    except Exception:
        log.exception("Operation job %s: could not mark it uncertain", ctx.job_id)
        return
    log.error("Operation job %s is uncertain: %s", ctx.job_id, reason, exc_info=exc)
    raise Skip(f"uncertain: {reason}") from exc


def _attempt(
    ctx: JobContext,
    execution_id: str,
    command_id: str,
    name: str,
    version: str,
    input: Any,
) -> Any:
    _skip_if_decided(ctx, execution_id)
    definition = find_operation(name, version)
    if definition is None:
        log.warning(
            "Operation job %s needs operation %r version %r, which this worker does not "
            "have; leaving it for a worker that does",
            ctx.job_id,
            name,
            version,
            extra={"job_id": ctx.job_id, "operation": name, "version": version},
        )
        missing_code.note("operation", name, version, ctx.job_id)
        raise Snooze(MISSING_CODE_RETRY)
    op_ctx = OperationContext(ctx, execution_id=execution_id, command_id=command_id)
    watchdog = _Watchdog(ctx, execution_id, command_id, definition.timeout)
    try:
        result = definition.fn(op_ctx, input)
    except Uncertain as exc:
        watchdog.settle()
        operation_mark_uncertain(
            ctx.lease,
            execution_id=execution_id,
            command_id=command_id,
            reason=exc.reason,
            finish_job=False,
        )
        raise Skip(f"uncertain: {exc.reason}") from exc
    except Abort as exc:
        watchdog.settle()
        _fail(ctx, exc.message)
    except (Snooze, Skip, LeaseLostError):
        watchdog.settle()
        raise
    except BaseException as exc:  # the worker fails the attempt for any of them too
        watchdog.settle()
        failures = ctx.attempt - ctx.crash_attempt  # failed attempts, this one included
        if failures >= definition.max_attempts:
            _fail(ctx, f"{exception_reason(exc)} (after {failures} attempt(s))")
        raise RetryAfter(definition.delay_after(failures), exception_reason(exc)) from exc
    watchdog.settle()
    # A result the store cannot keep (not JSON, a NUL character or an unpaired surrogate,
    # nested too deeply, too large) would fail every attempt, rerunning the effect.
    try:
        check_result_sent(connection_for(ctx.using), result, check_result(result))
    except ResultTooLargeError as exc:
        _fail(ctx, f"the Operation's result is too large to keep: {exc}")
    except (TypeError, ValueError) as exc:
        _fail(ctx, f"the Operation's result cannot be kept: {exc}")
    return result


def _skip_if_decided(ctx: JobContext, execution_id: str) -> None:
    """A re-run (crash, retry) must not repeat an effect whose outcome is already known,
    and no attempt, the first included, runs for an execution that has ended: a cancel
    cancels the execution's jobs in a transaction after its own, and a crash between the
    two leaves them to run. An Operation of a run that continued as new still runs once:
    the run asked for its effect, and only its outcome has nobody waiting."""
    if ctx.attempt == 1:  # no outcome or uncertain mark can exist yet: one read
        status = RerunStatus(execution_state(execution_id), settled=False, uncertain=False)
    else:
        status = operation_rerun_status(execution_id, ctx.job_id)
    if status.execution_state is None or status.execution_state in TERMINAL:
        raise Skip(f"execution {execution_id} is {status.execution_state or 'gone'}")
    if status.settled:
        raise Skip("the Operation's outcome is already recorded")
    if status.uncertain:
        raise Skip("the Operation is uncertain: an operator decides")


def _fail(ctx: JobContext, error: str) -> None:
    operation_mark_failed(ctx.lease, error=error)
    raise Skip(error)


class _Deadlines(threading.Thread):
    """One thread per process that fires StartToClose deadlines: starting a thread per
    Operation would cost more than running a small Operation. A fired deadline runs on a
    thread of its own, so a slow store write never delays the next one."""

    def __init__(self) -> None:
        super().__init__(name="headgate-durable-deadlines", daemon=True)
        self._cond = threading.Condition()
        self._heap: list[list[Any]] = []  # [monotonic deadline, order, callback or None]
        self._order = itertools.count()
        self._cancelled = 0

    def add(self, seconds: float, fire: Callable[[], None]) -> list[Any]:
        entry = [time.monotonic() + seconds, next(self._order), fire]
        with self._cond:
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:  # only an earlier deadline changes the thread's wait
                self._cond.notify()
        return entry

    def cancel(self, entry: list[Any]) -> None:
        with self._cond:
            if entry[2] is None:
                return
            entry[2] = None
            self._cancelled += 1
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [e for e in self._heap if e[2] is not None]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                at, _, fire = self._heap[0]
                if fire is not None and at > time.monotonic():
                    self._cond.wait(at - time.monotonic())
                    continue
                heapq.heappop(self._heap)
                if fire is None:
                    self._cancelled -= 1
                    continue
            threading.Thread(target=fire, name="headgate-durable-timeout", daemon=True).start()


_deadlines: _Deadlines | None = None
_deadlines_lock = threading.Lock()


def deadlines() -> _Deadlines:
    global _deadlines
    with _deadlines_lock:
        if _deadlines is None:
            _deadlines = _Deadlines()
            _deadlines.start()
        return _deadlines


class _Watchdog:
    """Records an Operation as uncertain when its attempt outlives StartToClose.

    It fires even if the handler never returns; the attempt's job is archived at that
    moment, so the worker's later writes for it do not land.
    """

    def __init__(
        self, ctx: JobContext, execution_id: str, command_id: str, timeout: timedelta | None
    ) -> None:
        self._ctx = ctx
        self._execution_id = execution_id
        self._command_id = command_id
        self._timeout = timeout
        self._lock = threading.Lock()
        self._fired = False
        self._recorded = threading.Event()
        self._entry = (
            None if timeout is None else deadlines().add(timeout.total_seconds(), self._expire)
        )

    def settle(self) -> None:
        """The handler is done: cancel the watchdog, or stop the attempt if it fired."""
        if self._entry is None:
            return
        deadlines().cancel(self._entry)
        with self._lock:
            fired = self._fired
            self._fired = True  # from now on the watchdog does nothing
        if fired:
            self._recorded.wait()
            raise LeaseLostError(
                f"the attempt outlived its StartToClose timeout ({self._timeout}); "
                "the Operation is uncertain"
            )

    def _expire(self) -> None:
        with self._lock:
            if self._fired:
                return
            self._fired = True
        try:
            operation_mark_uncertain(
                self._ctx.lease,
                execution_id=self._execution_id,
                command_id=self._command_id,
                reason=f"start-to-close timeout after {self._timeout} (uncertain)",
                finish_job=True,
            )
        except LeaseLostError:
            pass  # the attempt had already lost its lease: nothing to record
        except Exception:
            log.exception("could not record the timeout of Operation job %s", self._ctx.job_id)
        finally:
            connections.close_all()  # this thread's own connections
            self._ctx.cancel()
            self._recorded.set()

"""Run one attempt of one job and say what happened, without writing anything.

Keeping the decision apart from the write lets the runner batch successes into one fenced
UPDATE while failures, snoozes and skips are written one by one.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import InterfaceError, OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django import tracing
from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.control import RetryAfter, Revoke, Skip, Snooze
from headgate_django.envelope import check_result, decode_call
from headgate_django.exceptions import LeaseLostError, TransactionLeftOpenError
from headgate_django.kernel import sealed
from headgate_django.registry import TaskDef, find_task
from headgate_django.store.packet import check_result_sent
from headgate_django.store.vendor import connection_for
from headgate_django.worker.async_runner import AsyncRunner, Escaped, Leaks, run_alone

log = logging.getLogger("headgate_django.worker")


@dataclass(frozen=True)
class Succeeded:
    result: Any
    logs: dict[str, Any] | None = None  # what ctx.log kept, saved with the outcome


@dataclass(frozen=True)
class Committed:
    """The handler's ``ctx.once(..., last=True)`` already completed the job, with the
    effect's result, in the effect's own commit: nothing is left to write."""

    result: Any


@dataclass(frozen=True)
class Failed:
    error: str
    traceback: str | None = None
    delay: timedelta | None = None
    exception: str | None = None  # dotted path of the exception class, when there was one
    # The handler failed on a database connection that no longer works (a restarted or
    # killed session): the worker's fault, not the job's, so the runner runs it again.
    connection_lost: bool = False
    logs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Snoozed:
    delay: timedelta


@dataclass(frozen=True)
class Skipped:
    reason: str
    logs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Revoked:
    reason: str


@dataclass(frozen=True)
class Undecodable:
    reason: str
    traceback: str | None = None
    logs: dict[str, Any] | None = None


@dataclass(frozen=True)
class LeaseLost:
    reason: str


Outcome = Succeeded | Committed | Failed | Snoozed | Skipped | Revoked | Undecodable | LeaseLost
_SUCCEEDED = Succeeded(result=None)  # what most attempts return: made once, it is immutable


def decode(
    definition: TaskDef, payload: bytes, schema_version: int
) -> tuple[list[Any], dict[str, Any]]:
    """Payload bytes → call arguments, upcasting older schema versions. ``ValueError`` if impossible."""
    if schema_version > definition.schema_version:
        raise ValueError(
            f"payload schema_version {schema_version} is newer than this worker's "
            f"{definition.kind} (version {definition.schema_version})"
        )
    if payload[:1] == sealed.MAGIC[:1] and sealed.is_sealed(payload):
        # Only here, in the worker: a ring without the payload's key id is ValueError.
        payload = sealed.unseal(payload, sealed.parse_ring(headgate_settings.ENCRYPTION_KEYS))
    args, kwargs = decode_call(payload)
    if schema_version < definition.schema_version:
        if definition.upcaster is None:
            raise ValueError(
                f"no upcaster from schema_version {schema_version} to "
                f"{definition.schema_version} for {definition.kind}"
            )
        args, kwargs = definition.upcaster(schema_version, args, kwargs)
    return args, kwargs


#: The outcomes whose attempt's log lines are saved with them (the reference's rule).
_LOGGED = (Succeeded, Failed, Skipped, Undecodable)


def run_attempt(
    ctx: JobContext, payload: bytes, schema_version: int, async_runner: AsyncRunner | None
) -> Outcome:
    """Run the attempt (in its span, with tracing on); the outcome carries what the
    handler logged (``ctx.log``)."""
    if tracing.ENABLED and tracing.active():
        return tracing.traced(
            ctx, lambda: with_logs(ctx, _run(ctx, payload, schema_version, async_runner)), label
        )
    return with_logs(ctx, _run(ctx, payload, schema_version, async_runner))


def with_logs(ctx: JobContext, outcome: Outcome) -> Outcome:
    """``outcome`` carrying what the attempt logged, for the outcomes that save logs."""
    if ctx.attempt_log is None or not isinstance(outcome, _LOGGED):
        return outcome  # most attempts log nothing: no record to make
    record = ctx.attempt_log.record(ctx.attempt)
    return outcome if record is None else dataclasses.replace(outcome, logs=record)


def outcome_of(exc: BaseException) -> Outcome:
    """What an exception a handler raised (or a batch handler returned for a member) means."""
    if isinstance(exc, Snooze):
        return Snoozed(delay=exc.delay)
    if isinstance(exc, Skip):
        return Skipped(reason=exc.reason)
    if isinstance(exc, Revoke):
        return Revoked(reason=exc.reason)
    if isinstance(exc, LeaseLostError):
        return LeaseLost(reason=str(exc))
    if isinstance(exc, RetryAfter):
        cause = exc.__cause__ or exc
        trace = "".join(traceback.format_exception(exc))
        return Failed(
            error=exc.error, traceback=trace, delay=exc.delay, exception=class_path(cause)
        )
    return failure(exc)


def _run(
    ctx: JobContext, payload: bytes, schema_version: int, async_runner: AsyncRunner | None
) -> Outcome:
    leaks = Leaks(ctx.job_id, ctx.kind)  # what an async handler left open
    outcome = _run_handler(ctx, payload, schema_version, async_runner, leaks)
    left = leaks.end()
    if left:
        log.warning(
            "the async handler of job %s left a transaction open on %s in sync_to_async "
            "code; rolled back",
            ctx.job_id,
            ", ".join(left),
        )
    return left_open(outcome, left)


def _run_handler(
    ctx: JobContext,
    payload: bytes,
    schema_version: int,
    async_runner: AsyncRunner | None,
    left: Leaks,
) -> Outcome:
    definition = find_task(ctx.kind)
    if definition is None:
        # The claim only takes known kinds; this means the registry changed under us.
        return Failed(error=f"no handler registered for kind {ctx.kind!r}")
    if definition.batch_size is not None:  # run alone (a test helper): a batch of one
        from headgate_django.worker.batches import call_batch

        return call_batch(definition, [(ctx, payload, schema_version)])[0]
    try:
        args, kwargs = decode(definition, payload, schema_version)
    except (ValueError, UnicodeDecodeError) as exc:
        return Undecodable(reason=str(exc), traceback=traceback.format_exc())
    # Not ``connections[…]``: its lookup through asgiref's ``Local`` cost more than the rest
    # of a no-op attempt's bookkeeping here.
    conn = connection_for(ctx.using)
    watch = _SessionWatch()
    try:
        if definition.is_async:
            coro = definition.fn(ctx, *args, **kwargs)
            runs = run_alone if async_runner is None else async_runner.run
            result = runs(coro, left)
        else:
            # What ``conn.execute_wrapper(watch)`` does, without building a generator-based
            # context manager for every attempt.
            conn.execute_wrappers.append(watch)
            try:
                result = definition.fn(ctx, *args, **kwargs)
            finally:
                conn.execute_wrappers.pop()
    except Snooze as exc:
        return Snoozed(delay=exc.delay)
    except Skip as exc:
        return Skipped(reason=exc.reason)
    except Revoke as exc:
        return Revoked(reason=exc.reason)
    except LeaseLostError as exc:
        return LeaseLost(reason=str(exc))
    except RetryAfter as exc:
        cause = exc.__cause__ or exc
        return Failed(
            error=exc.error,
            traceback=traceback.format_exc(),
            delay=exc.delay,
            exception=class_path(cause),
        )
    except Escaped as exc:
        return failure(exc.exc)
    except Exception as exc:
        # Stored arguments that the handler cannot take (written by hand, by another
        # service, or before its signature changed) fail every attempt alike: undecodable,
        # for an operator to repair, not retried. Asked only once a call has failed.
        misfit = definition.misfit(args, kwargs) if isinstance(exc, TypeError) else None
        if misfit is not None:
            return Undecodable(reason=misfit, traceback=traceback.format_exc())
        return failure(
            exc, connection_lost=not definition.is_async and _connection_lost(exc, conn, watch)
        )
    except BaseException as exc:
        # SystemExit, KeyboardInterrupt, GeneratorExit raised by the handler: its failure like
        # any other. Only a signal stops a worker, and a handler thread must live on.
        return failure(exc)
    if ctx.completed is not None:
        return Committed(result=ctx.completed[0])
    if ctx.cancelled:
        return LeaseLost(reason="the attempt was cancelled while it ran")
    if result is None:  # most handlers: nothing to encode or measure
        return _SUCCEEDED
    return result_outcome(result, conn)


def result_outcome(result: Any, conn: BaseDatabaseWrapper) -> Outcome:
    """Success with ``result``, or the failure of a result the store cannot keep: not JSON,
    over ``MAX_RESULT_BYTES``, or too large for one statement on MySQL/MariaDB
    (``max_allowed_packet``). Refused here, as a failure of this job, rather than failing
    the batched ack of every job written with it."""
    try:
        check_result_sent(conn, result, check_result(result))
    except (TypeError, ValueError) as exc:
        return failure(exc)
    return Succeeded(result=result)


def left_open(outcome: Outcome, aliases: list[str]) -> Outcome:
    """``outcome`` of an attempt whose handler returned with a transaction open on the
    databases ``aliases``, since rolled back (``store.sessions``). A success is a failure:
    the writes it stood for are gone. Any other outcome stands, as it would had the
    handler's ``atomic()`` block rolled back as it raised."""
    if not aliases or not isinstance(outcome, Succeeded | Committed):
        return outcome
    names = ", ".join(map(repr, aliases))
    exc = TransactionLeftOpenError(
        f"the handler left a transaction open on database {names} (an atomic() block it "
        "never left, or autocommit it turned off): its writes were rolled back"
    )
    logs = outcome.logs if isinstance(outcome, Succeeded) else None
    return dataclasses.replace(failure(exc), logs=logs)


def failure(exc: BaseException, *, connection_lost: bool = False) -> Failed:
    """The failed outcome of an attempt that raised ``exc``, with its class and traceback."""
    return Failed(
        error=f"{type(exc).__name__}: {exc}",
        traceback="".join(traceback.format_exception(exc)),
        exception=class_path(exc),
        connection_lost=connection_lost,
    )


def class_path(exc: BaseException) -> str:
    """The dotted path of ``exc``'s class, as Django's Tasks report it."""
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


class _SessionWatch:
    """Remembers the session a sync handler's failing query ran on (an execute wrapper).

    By the time the handler's exception reaches the worker, Django may have replaced that
    session: when the rollback at the end of a failed ``atomic()`` block fails too, as it
    does once the session is gone, Django drops the connection and opens a new one.
    """

    def __init__(self) -> None:
        self.failed_on: Any = None  # the driver connection of the last failing query

    def __call__(self, execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        try:
            return execute(sql, params, many, context)
        except (OperationalError, InterfaceError):
            self.failed_on = context["connection"].connection
            raise


def _connection_lost(exc: Exception, conn: BaseDatabaseWrapper, watch: _SessionWatch) -> bool:
    """Whether ``exc``, raised by a sync handler, came from a session that no longer answers.

    Only connection-level errors qualify, and only when the session is then gone: Django
    replaced the one the failing query ran on, or the thread's connection fails a ping. A
    lock timeout or a deadlock leaves the session usable and is the job's failure like
    any other. (An async handler's queries run on another thread, whose connection this
    one cannot see: its errors count as the job's.)
    """
    if not isinstance(exc, _connection_errors(conn)):
        return False
    if watch.failed_on is not None and watch.failed_on is not conn.connection:
        return True
    return conn.connection is not None and not conn.is_usable()


def _connection_errors(conn: BaseDatabaseWrapper) -> tuple[type[Exception], ...]:
    """Django's connection-level errors, and the driver's own: a query that fails on a dead
    session can reach the handler as the driver's error, not Django's. On mysqlclient the
    ORM closes the cursor after the failure, and that close fails too, with an unwrapped
    ``MySQLdb.OperationalError`` that replaces Django's ``OperationalError``."""
    driver: Any = conn.Database  # type: ignore[attr-defined]  # every backend has one
    return (OperationalError, InterfaceError, driver.OperationalError, driver.InterfaceError)


def runs_again(ctx: JobContext, exc: BaseException) -> bool:
    """Whether the worker will run this attempt again, uncharged, after ``exc`` escapes the
    sync handler now running it: its session died under it, and the worker repeats such an
    attempt once (what ``Worker._run_and_settle`` decides, asked from inside the handler)."""
    if not ctx.repeats_lost_connection or not isinstance(exc, Exception):
        return False
    conn = connection_for(ctx.using)
    watch = next((w for w in conn.execute_wrappers if isinstance(w, _SessionWatch)), None)
    return watch is not None and _connection_lost(exc, conn, watch)


def label(outcome: Outcome) -> str:
    """The outcome's name for metrics: succeeded, failed, snoozed, skipped, revoked,
    undecodable, lost."""
    return _LABELS[type(outcome)]


_LABELS: dict[type, str] = {
    Succeeded: "succeeded",
    Committed: "succeeded",
    Failed: "failed",
    Snoozed: "snoozed",
    Skipped: "skipped",
    Revoked: "revoked",
    Undecodable: "undecodable",
    LeaseLost: "lost",
}

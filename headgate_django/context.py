"""``JobContext``: what a handler gets as its first argument.

Everything it writes (steps, cursor, progress) is fenced by the attempt's lease, so once
the lease is lost (reclaimed, cancelled, timed out) nothing the handler writes lands and
``ctx.cancelled`` turns true.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections
from django.utils import timezone

from headgate_django.envelope import check_result
from headgate_django.exceptions import (
    DeadlineExceededError,
    DefinitionError,
    LeaseLostError,
    PayloadTooLargeError,
)
from headgate_django.kernel.attempt_log import AttemptLog
from headgate_django.kernel.schedule_origin import PeriodicOrigin, origin_of
from headgate_django.kernel.storable import storable_text
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.fenced import (
    LeaseRef,
    job_save_checkpoint,
    job_save_progress,
    job_set_cursor,
)

T = TypeVar("T")
_MAX_PROGRESS = 2**53 - 1


class WorkerHost(Protocol):
    """What a handler may ask of the worker running it, to run a follow-up job on its own
    thread (the durable runtime's eager Operations). ``ctx.host`` is None outside a worker
    (``headgate_django.testing``): follow-ups then go through the queue like any job."""

    worker_id: str
    lease_ttl: timedelta

    @property
    def stopping(self) -> bool:
        """True once the worker drains: take on no more work."""
        ...

    def serves(self, kind: str, queue: str) -> bool:
        """Would this worker's claim take a job of ``kind`` on ``queue``?"""
        ...

    def adopt(self, ref: LeaseRef, ctx: JobContext) -> None:
        """Renew ``ref`` with the worker's own leases until :meth:`disown`; a lost lease
        cancels ``ctx``; a drain that times out releases it. Counts as a claim."""
        ...

    def disown(self, ref: LeaseRef) -> None: ...

    def count_outcome(self, label: str, queue: str | None = None) -> None:
        """Count the recorded outcome of an adopted job in the worker's status line
        (``completed``, ``retried``, ``archived``, … as :func:`settle` labels them) and,
        given its ``queue``, in the per-minute series."""
        ...


_EVENTS_LOCK = threading.Lock()  # makes each context's cancel Event exactly once


class JobContext:
    """The running attempt of one job."""

    def __init__(self, claimed: ClaimedJob, *, worker_id: str = "", using: str = "default") -> None:
        self._claimed = claimed
        self._using = using
        self._cancelled = False
        self._cancel_event: threading.Event | None = None  # made by the first wait
        self._checkpoint: dict[str, Any] = dict(claimed.checkpoint)
        self._cursor_value = claimed.cursor
        self.worker_id = worker_id
        self.host: WorkerHost | None = None
        #: What the handler reported its attempt cost (:meth:`charge`); None if it did not.
        self.charged: int | None = None
        self._deadline_hit = False  # a fenced write found the deadline passed
        #: ``(result,)`` once ``once(..., last=True)`` completed the job itself.
        self.completed: tuple[Any] | None = None
        #: The attempt's log (:attr:`log`), made when the handler first logs.
        self.attempt_log: AttemptLog | None = None
        #: The enqueue's W3C trace context, read by the worker when tracing is on.
        self.trace_parent: dict[str, str] | None = None
        #: Whether the worker runs this attempt again, uncharged, on a new connection should
        #: the handler's session die under it (``runworkers``, once per attempt; not
        #: ``testing.run_jobs``).
        self.repeats_lost_connection = False

    # -- identity ----------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        return self._claimed.ref.job_id

    @property
    def kind(self) -> str:
        return self._claimed.kind

    @property
    def queue(self) -> str:
        return self._claimed.queue

    @property
    def attempt(self) -> int:
        """1 for the first attempt; failures and crashes both count."""
        return self._claimed.attempt + self._claimed.crash_attempt + 1

    @property
    def crash_attempt(self) -> int:
        return self._claimed.crash_attempt

    @property
    def max_attempts(self) -> int:
        """The job's budget of failed attempts: the failure of attempt ``max_attempts`` (not
        counting crashes) archives it."""
        return self._claimed.max_attempts

    @property
    def workflow_id(self) -> str | None:
        return self._claimed.workflow_id

    @property
    def periodic_origin(self) -> PeriodicOrigin | None:
        """The schedule and tick this job was enqueued for (``.schedule``, ``.tick_at``),
        read back from the tick's job id or workflow id; None for any other job."""
        return origin_of(self.job_id) or origin_of(self.workflow_id)

    @property
    def deadline(self) -> datetime | None:
        """When the job stops being worth running (``Envelope.deadline``), or None."""
        return self._claimed.deadline

    @property
    def deadline_exceeded(self) -> bool:
        """True once the deadline has passed: the store archives the job at the attempt's
        next renewal or fenced write, which then raises ``DeadlineExceededError``. Read
        before a long step to stop early (the store's clock decides; this one only hints)."""
        deadline = self._claimed.deadline
        return deadline is not None and (self._deadline_hit or timezone.now() >= deadline)

    @property
    def lease(self) -> LeaseRef:
        return self._claimed.ref

    @property
    def using(self) -> str:
        """The database alias the attempt's fenced writes go to."""
        return self._using

    @property
    def rate_class(self) -> str | None:
        """The rate class whose tokens this job spends (``Envelope.rate_class``)."""
        return self._claimed.rate_class

    @property
    def weight(self) -> int:
        """What the claim charged the job's rate class: its ``weight``."""
        return self._claimed.weight

    @property
    def log(self) -> AttemptLog:
        """This attempt's log: ``ctx.log.info("fetched", rows=12)`` (and ``debug``,
        ``warning``, ``error``). Entries are kept in memory and saved with the attempt's
        outcome (success, retry, skip, undecodable); bounds in :mod:`.kernel.attempt_log`.
        Read them with ``GET /api/v1/jobs/{id}/logs`` or on the job's console page."""
        log = self.attempt_log
        if log is None:
            with _EVENTS_LOCK:
                if self.attempt_log is None:
                    self.attempt_log = AttemptLog()
                log = self.attempt_log
        return log

    def charge(self, cost: int) -> None:
        """Report what this attempt really cost against its rate class. When the attempt
        is acknowledged the bucket is given back (or charged) the difference from the
        ``weight`` it was charged at the claim. The last call counts."""
        if type(cost) is not int or cost < 0:
            raise DefinitionError(f"charge() takes a whole number of tokens from 0, got {cost!r}")
        self.charged = cost

    # -- cancellation ------------------------------------------------------------------
    # Most attempts are never cancelled nor wait to be, so the flag is a plain attribute and
    # the Event exists only once something waits. cancel() sets the flag before it looks
    # for an Event and a waiter makes the Event before it looks at the flag, so whichever
    # runs second sees the other's write.
    @property
    def cancelled(self) -> bool:
        """True once the lease is lost or the job was cancelled: stop cooperatively."""
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True
        event = self._cancel_event
        if event is not None:
            event.set()

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early if the attempt is cancelled."""
        event = self._cancel_event
        if event is None:
            with _EVENTS_LOCK:
                if self._cancel_event is None:
                    self._cancel_event = threading.Event()
                event = self._cancel_event
        if self._cancelled:
            event.set()
        return event.wait(timeout)

    def _fenced(self, write: Callable[[], None]) -> None:
        try:
            write()
        except LeaseLostError as exc:
            self._deadline_hit = isinstance(exc, DeadlineExceededError)
            self.cancel()
            raise

    # -- resumable work ----------------------------------------------------------------
    @property
    def completed_steps(self) -> list[str]:
        return list(self._checkpoint.get("completed_steps", []))

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` once across retries: a completed step is skipped and its result reused.

        The checkpoint naming the step is written (fenced) before ``fn`` runs, so a crash
        inside it is attributed to this step.
        """
        done, value = self._finished(name)
        if done:
            return value  # type: ignore[no-any-return]
        self._mark_in_progress(name)
        value = fn()
        self._mark_done(name, value)
        return value

    def step_cursor(self, name: str, fn: Callable[[bytes | None], T]) -> T:
        """Like :meth:`step`, but ``fn(cursor)`` resumes from the last :meth:`set_cursor`."""
        done, value = self._finished(name)
        if done:
            return value  # type: ignore[no-any-return]
        resume = self._enter_cursor_step(name)
        self._mark_in_progress(name)
        value = fn(resume)
        self._leave_cursor_step(name, value)
        return value

    def set_cursor(self, value: bytes) -> None:
        """Save the position of the current cursor step (fenced)."""
        if not isinstance(value, bytes):
            raise DefinitionError("a cursor is bytes")
        if "cursor_step" not in self._checkpoint:
            raise DefinitionError("set_cursor() is only valid inside step_cursor()")
        self._fenced(lambda: job_set_cursor(self.lease, value, self._checkpoint, using=self._using))
        self._cursor_value = value

    @property
    def cursor(self) -> bytes | None:
        return self._cursor_value

    def set_progress(self, current: int, total: int, message: str = "") -> None:
        """Record ``current`` of ``total`` (integers: the API and the console show whole
        steps, and a float such as ``0.1 + 0.2`` would not read back as written)."""
        if any(isinstance(n, bool) or not isinstance(n, int) for n in (current, total)):
            raise DefinitionError(
                f"progress needs integers, got current={current!r} and total={total!r}"
            )
        if not (1 <= total <= _MAX_PROGRESS) or not (0 <= current <= total):
            raise DefinitionError("progress needs 0 ≤ current ≤ total and 1 ≤ total ≤ 2**53-1")
        if not isinstance(message, str):
            raise DefinitionError(f"a progress message must be a string, not {message!r}")
        progress = {"current": current, "total": total, "message": storable_text(message[:512])}
        self._fenced(lambda: job_save_progress(self.lease, progress, using=self._using))

    def set_output(self, output: bytes | str) -> None:
        """Replace the job's output (text is stored as UTF-8), fenced like every write.

        At most ``store.output.MAX_OUTPUT_BYTES`` (1 MiB): larger raises
        ``OutputTooLargeError`` and keeps the previous output. Operators read it with
        ``GET /api/v1/jobs/{id}/output`` (payload permission)."""
        from headgate_django.store.output import job_save_output

        if isinstance(output, str):
            output = output.encode()
        elif not isinstance(output, bytes | bytearray | memoryview):
            raise TypeError(f"output must be bytes or str, not {type(output).__name__}")
        data = bytes(output)
        self._fenced(lambda: job_save_output(self.lease, data, using=self._using))

    def once(self, name: str, fn: Callable[[], T], *, last: bool = False) -> T:
        """Run ``fn`` at most once for this job, however often the job is retried.

        ``fn`` runs in a transaction (on the attempt's database alias) that also records
        the effect ``name`` under this attempt's lease: its writes and the record commit
        together or not at all. A later attempt gets the recorded result back without
        running ``fn``; a stale attempt (lease lost) raises ``LeaseLostError`` before it
        runs. The result must be JSON. With ``last=True`` the effect is the job's last act:
        the job completes, with ``fn``'s result as its own, in the same commit (what the
        handler returns afterwards is not recorded). Operators read the records with
        ``GET /api/v1/jobs/{id}/effects``."""
        from headgate_django.store.effects import job_effect_once
        from headgate_django.worker.settle import completion_of

        result: T | None = None
        complete = completion_of(self._claimed) if last else None

        def write() -> None:
            nonlocal result
            result = job_effect_once(
                self.lease,
                name,
                fn,
                complete=complete,
                lease_ttl=self.host.lease_ttl if self.host is not None else None,
                using=self._using,
            )

        self._fenced(write)
        if last:
            self.completed = (result,)
        return result  # type: ignore[return-value]

    async def aonce(self, name: str, fn: Callable[[], T], *, last: bool = False) -> T:
        """:meth:`once` for ``async def`` handlers. ``fn`` is a plain function: it runs,
        with its transaction, on Django's thread for database work."""
        return await self._on_db_thread(functools.partial(self.once, name, fn, last=last))

    # -- the same writes for ``async def`` handlers --------------------------------------
    # Django refuses database work on an event loop's thread, so each fenced write runs
    # through ``sync_to_async`` (in a worker, on the thread the attempt's thread-sensitive
    # sync code runs on: see ``worker.async_runner``), while the handler's own coroutines
    # stay on the loop.

    async def _on_db_thread(self, write: Callable[[], T]) -> T:
        """``write()`` on the thread for the attempt's sync database work, whose session is
        first replaced if an error left it dead.

        Nothing else ever closes that thread's session (the worker refreshes its handler
        threads' only): once the server dropped it (a restart, an idle timeout), every later
        write of every async handler that used it failed on it, each using an attempt."""
        using = self._using

        def run() -> T:
            conn = connections[using]
            if conn.errors_occurred:
                with contextlib.suppress(DatabaseError):  # closed all the same
                    conn.close_if_unusable_or_obsolete()
            return write()

        return await sync_to_async(run)()

    async def astep(self, name: str, fn: Callable[[], T | Awaitable[T]]) -> T:
        """:meth:`step` for ``async def`` handlers; ``fn`` may be a coroutine function."""
        done, value = self._finished(name)
        if done:
            return value  # type: ignore[no-any-return]
        await self._on_db_thread(functools.partial(self._mark_in_progress, name))
        value = await _awaited(fn())
        await self._on_db_thread(functools.partial(self._mark_done, name, value))
        return value  # type: ignore[no-any-return]

    async def astep_cursor(self, name: str, fn: Callable[[bytes | None], T | Awaitable[T]]) -> T:
        """:meth:`step_cursor` for ``async def`` handlers; ``fn`` may be a coroutine function."""
        done, value = self._finished(name)
        if done:
            return value  # type: ignore[no-any-return]
        resume = self._enter_cursor_step(name)
        await self._on_db_thread(functools.partial(self._mark_in_progress, name))
        value = await _awaited(fn(resume))
        await self._on_db_thread(functools.partial(self._leave_cursor_step, name, value))
        return value  # type: ignore[no-any-return]

    async def aset_cursor(self, value: bytes) -> None:
        await self._on_db_thread(functools.partial(self.set_cursor, value))

    async def aset_progress(self, current: int, total: int, message: str = "") -> None:
        await self._on_db_thread(functools.partial(self.set_progress, current, total, message))

    async def aset_output(self, output: bytes | str) -> None:
        """:meth:`set_output` for ``async def`` handlers."""
        await self._on_db_thread(functools.partial(self.set_output, output))

    def _finished(self, name: str) -> tuple[bool, Any]:
        """(True, its result) for a step completed by an earlier attempt."""
        if name in self._checkpoint.get("completed_steps", []):
            return True, self._checkpoint.get("step_results", {}).get(name)
        return False, None

    def _enter_cursor_step(self, name: str) -> bytes | None:
        """Start cursor step ``name``: the saved position if the last attempt was inside it."""
        resume = self._cursor_value if self._checkpoint.get("cursor_step") == name else None
        self._checkpoint["cursor_step"] = name
        return resume

    def _leave_cursor_step(self, name: str, value: Any) -> None:
        self._cursor_value = None
        self._checkpoint.pop("cursor_step", None)
        self._mark_done(name, value, clear_cursor=True)

    def _mark_in_progress(self, name: str) -> None:
        self._checkpoint["in_progress_step"] = name
        self._fenced(lambda: job_save_checkpoint(self.lease, self._checkpoint, using=self._using))

    def _mark_done(self, name: str, value: Any, *, clear_cursor: bool = False) -> None:
        # The job result's rule, before the checkpoint changes: a value one database would
        # refuse (nested too deep for MariaDB, a NUL for PostgreSQL) fails the same on all.
        try:
            check_result(value)
        except PayloadTooLargeError:
            raise
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"step {name!r}: {exc}") from None
        self._checkpoint.setdefault("completed_steps", []).append(name)
        self._checkpoint["last_completed_step"] = name
        self._checkpoint.pop("in_progress_step", None)
        self._checkpoint.setdefault("step_results", {})[name] = value
        if clear_cursor:
            self._fenced(
                lambda: job_set_cursor(self.lease, None, self._checkpoint, using=self._using)
            )
        else:
            self._fenced(
                lambda: job_save_checkpoint(self.lease, self._checkpoint, using=self._using)
            )


async def _awaited(value: T | Awaitable[T]) -> T:
    return await value if inspect.isawaitable(value) else value  # type: ignore[return-value]

"""``JobContext``: what a handler gets as its first argument.

Everything it writes (steps, cursor, progress) is fenced by the attempt's lease, so once
the lease is lost (reclaimed, cancelled, timed out) nothing the handler writes lands and
``ctx.cancelled`` turns true.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from asgiref.sync import sync_to_async

from headgate_django.exceptions import DefinitionError, LeaseLostError
from headgate_django.kernel.schedule_origin import PeriodicOrigin, origin_of
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

    def count_outcome(self, label: str) -> None:
        """Count the recorded outcome of an adopted job in the worker's status line
        (``completed``, ``retried``, ``archived``, … as :func:`settle` labels them)."""
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
    def workflow_id(self) -> str | None:
        return self._claimed.workflow_id

    @property
    def periodic_origin(self) -> PeriodicOrigin | None:
        """The schedule and tick this job was enqueued for (``.schedule``, ``.tick_at``),
        read back from the tick's job id or workflow id; None for any other job."""
        return origin_of(self.job_id) or origin_of(self.workflow_id)

    @property
    def lease(self) -> LeaseRef:
        return self._claimed.ref

    @property
    def using(self) -> str:
        """The database alias the attempt's fenced writes go to."""
        return self._using

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
        except LeaseLostError:
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
        if not (1 <= total <= _MAX_PROGRESS) or not (0 <= current <= total):
            raise DefinitionError("progress needs 0 ≤ current ≤ total and 1 ≤ total ≤ 2**53-1")
        progress = {"current": current, "total": total, "message": message[:512]}
        self._fenced(lambda: job_save_progress(self.lease, progress, using=self._using))

    # -- the same writes for ``async def`` handlers --------------------------------------
    # Django refuses database work on an event loop's thread, so each fenced write runs
    # through ``sync_to_async`` (Django's one thread for sync database work), while the
    # handler's own coroutines stay on the loop.

    async def astep(self, name: str, fn: Callable[[], T | Awaitable[T]]) -> T:
        """:meth:`step` for ``async def`` handlers; ``fn`` may be a coroutine function."""
        done, value = self._finished(name)
        if done:
            return value  # type: ignore[no-any-return]
        await sync_to_async(self._mark_in_progress)(name)
        value = await _awaited(fn())
        await sync_to_async(self._mark_done)(name, value)
        return value  # type: ignore[no-any-return]

    async def astep_cursor(self, name: str, fn: Callable[[bytes | None], T | Awaitable[T]]) -> T:
        """:meth:`step_cursor` for ``async def`` handlers; ``fn`` may be a coroutine function."""
        done, value = self._finished(name)
        if done:
            return value  # type: ignore[no-any-return]
        resume = self._enter_cursor_step(name)
        await sync_to_async(self._mark_in_progress)(name)
        value = await _awaited(fn(resume))
        await sync_to_async(self._leave_cursor_step)(name, value)
        return value  # type: ignore[no-any-return]

    async def aset_cursor(self, value: bytes) -> None:
        await sync_to_async(self.set_cursor)(value)

    async def aset_progress(self, current: int, total: int, message: str = "") -> None:
        await sync_to_async(self.set_progress)(current, total, message)

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

"""``enqueue_and_wait``: enqueue one job and block until it finishes, for scripts, tests and
request handlers that need the answer.

The job is enqueued in a transaction of its own (workers see it only once it commits, so
waiting inside the caller's transaction could never end: that is refused). On PostgreSQL
the job is flagged ``awaited`` in that transaction and the caller ``LISTEN``s beforehand,
so the worker's commit wakes it at once; it also reads the job every
:data:`RECONCILE_INTERVAL`, so a lost notification costs at most that. Elsewhere it reads
the job every :data:`POLL_INTERVAL`. A timeout leaves the job as it is (queued or running)
and raises :class:`WaitTimeoutError`, which carries the job id.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope
from headgate_django.exceptions import WaitInTransactionError, WaitTimeoutError

log = logging.getLogger("headgate_django.waiting")

#: PostgreSQL: how often the waiter reads the job besides listening (seconds).
RECONCILE_INTERVAL = 0.1
#: Other databases: how often the waiter reads the job (seconds).
POLL_INTERVAL = 0.05
#: The default ``timeout`` (seconds).
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class JobResult:
    """How a job that was waited for ended."""

    job_id: str
    #: ``completed``, ``archived``, ``cancelled``, ``quarantined``, ``undecodable``, or
    #: ``deleted`` (retention 0, a revoke, or an operator's delete: the row is gone).
    state: str
    #: The handler's return value (``None`` unless ``completed``).
    result: Any = None
    #: The message of the job's last recorded error, if any.
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the job completed."""
        return self.state == "completed"


def enqueue_and_wait(
    envelope: Envelope, *, timeout: float | None = DEFAULT_TIMEOUT, using: str = "default"
) -> JobResult:
    """Enqueue ``envelope`` and wait up to ``timeout`` seconds (``None``: no limit) for the
    job to reach a terminal state.

    Raises :class:`WaitInTransactionError` inside an atomic block (nothing is enqueued) and
    :class:`WaitTimeoutError` when the time is up (the job stays enqueued).
    """
    return _wait(envelope, timeout, using, threading.Event())


class _Abandoned(Exception):
    """The async caller of a wait was cancelled: its thread stops waiting."""


def _wait(
    envelope: Envelope, timeout: float | None, using: str, abandoned: threading.Event
) -> JobResult:
    """:func:`enqueue_and_wait`, which also stops (:class:`_Abandoned`) once ``abandoned``
    is set."""
    from headgate_django.store.waits import job_insert_awaited, job_outcome

    if not isinstance(envelope, Envelope):
        raise TypeError(f"enqueue_and_wait takes an Envelope, not {type(envelope).__name__}")
    check_timeout(timeout)
    if connections[using].in_atomic_block:
        raise WaitInTransactionError()
    listener = _listener(using)
    try:
        job_id = job_insert_awaited(envelope, notify=listener is not None, using=using)
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = RECONCILE_INTERVAL if listener is not None else POLL_INTERVAL
        while True:
            outcome = job_outcome(job_id, using=using)
            if outcome.finished:
                return JobResult(job_id, outcome.state, outcome.result, outcome.error)
            left = interval if deadline is None else min(interval, deadline - time.monotonic())
            if left <= 0:
                raise WaitTimeoutError(
                    f"job {job_id} did not finish within {timeout} s (it is {outcome.state})",
                    job_id=job_id,
                    state=outcome.state,
                )
            if listener is not None:
                listener.wait(job_id, left)
            else:
                abandoned.wait(left)
            if abandoned.is_set():
                raise _Abandoned()
    finally:
        if listener is not None:
            listener.close()


def check_timeout(timeout: object) -> None:
    """Refuse a ``timeout`` that is not seconds from 0 (or ``None``). NaN compares false
    with everything, so a deadline made of it would never come: a wait without end. Also
    what ``durable.Manager().update`` checks before it records anything."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds from 0, not {timeout!r}")


def _listener(using: str) -> Any:
    """A :class:`~headgate_django.store.waits.FinishedListener` where the database has
    notifications, else (or when it cannot connect) ``None``: the waiter polls."""
    from headgate_django.store.waits import FinishedListener

    if not (headgate_settings.LISTEN_NOTIFY and FinishedListener.supported(using)):
        return None
    try:
        return FinishedListener(using)
    except Exception as exc:
        log.warning("could not LISTEN for the job's finish (%s); polling instead", exc)
        return None


async def aenqueue_and_wait(
    envelope: Envelope, *, timeout: float | None = DEFAULT_TIMEOUT, using: str = "default"
) -> JobResult:
    """:func:`enqueue_and_wait` for async code: the wait runs on a thread of its own (with
    its own database connections, closed at the end), so the event loop is never blocked.

    Not on a pool's thread: a pool has a bound (a few threads on a small machine), beyond
    which waits would queue behind each other and their timeouts start late. A cancelled
    caller stops its thread's wait within one read interval, so no thread (nor listening
    session) outlives it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[JobResult] = loop.create_future()
    abandoned = threading.Event()

    def report(outcome: Callable[[], Any]) -> None:
        if not abandoned.is_set():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(lambda: done.done() or outcome())

    def run() -> None:
        try:
            result = _wait(envelope, timeout, using, abandoned)
        except BaseException as exc:
            report(functools.partial(done.set_exception, exc))
        else:
            report(functools.partial(done.set_result, result))
        finally:
            connections.close_all()

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name="headgate-wait", daemon=True).start()
    try:
        return await done
    finally:
        abandoned.set()

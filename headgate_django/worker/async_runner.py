"""The event loop of a worker's ``async def`` handlers, and the threads their sync code
runs on.

One loop, in its own thread, runs every async attempt of the worker; each handler thread
waits there for the attempt it started. The ORM is sync, so a handler reaches it through
``sync_to_async``: thread-sensitive calls run on the calling handler thread's lane (a
thread of its own, :class:`_Lane`), the others on the loop's pool (:class:`_CheckedPool`).
Whatever either leaves open is rolled back and counted against the attempt that left it
(see ``store.sessions`` for why a transaction left open matters), or, once that attempt is
over, said in a warning (:class:`Leaks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextvars import ContextVar
from typing import Any, TypeVar

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import DatabaseError, connections

from headgate_django.store.sessions import (
    may_hold_transaction,
    roll_back_left_open,
    thread_connection_storage,
)

log = logging.getLogger("headgate_django.worker")
_T = TypeVar("_T")


class AsyncRunner:
    """One event loop, in its own thread, for every ``async def`` handler of a worker.

    Each handler thread that runs an async attempt gets a lane of its own: the one thread
    on which its attempts' thread-sensitive ``sync_to_async`` code runs (see
    :func:`_contained`). Code sent off with ``thread_sensitive=False`` runs on the loop's
    pool of threads, checked call by call (:class:`_CheckedPool`).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._pool = _CheckedPool(thread_name_prefix="headgate-async-pool")
        self.loop.set_default_executor(self._pool)
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="headgate-async", daemon=True
        )
        self._thread.start()
        self._local = threading.local()  # the calling handler thread's lane
        self._lanes: list[_Lane] = []
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, Any], left: Leaks) -> Any:
        """``coro``'s result (see :func:`_contained` for ``left``)."""
        lane: _Lane | None = getattr(self._local, "lane", None)
        if lane is None:
            lane = self._local.lane = _Lane()
            with self._lock:
                self._lanes.append(lane)
        contained = _contained(coro, left, lane)
        future: Future[Any] = asyncio.run_coroutine_threadsafe(contained, self.loop)
        return future.result()

    def close(self) -> None:
        # The sessions the handlers' ``sync_to_async`` code opened end with the worker, as
        # its handler threads' do; unless a handler that outlived the drain still uses one.
        with self._lock:
            lanes, self._lanes = self._lanes, []
        wait([lane.close() for lane in lanes], timeout=1)  # all at once: one wait at most
        self._pool.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # an unclosed loop leaks its self-pipe socket
            self.loop.close()


class Leaks:
    """The databases on which one async attempt's handler left a transaction open, since
    rolled back: counted against the attempt until it ends (:meth:`end`), said in a
    warning after.

    A task the handler started and left running may still call ``sync_to_async(...,
    thread_sensitive=False)`` once the attempt is over. A transaction that call leaves
    open is rolled back as it returns, like any (:class:`_CheckedPool`), but the
    attempt's outcome is decided and stands: the warning, naming the job, is all that
    tells the handler's author that it leaks work past its attempt. (Thread-sensitive
    calls after the attempt are refused: see :class:`_Lane`.)
    """

    def __init__(self, job_id: str, kind: str) -> None:
        self._job = (job_id, kind)  # for the warning
        self._aliases: list[str] = []
        self._over = False
        self._lock = threading.Lock()

    def add(self, aliases: list[str]) -> None:
        """Count ``aliases``, rolled back, against the attempt; say them if it is over."""
        if not aliases:
            return
        with self._lock:
            if not self._over:
                self._aliases.extend(aliases)
                return
        log.warning(
            "a task the async handler of job %s (%s) left running opened a transaction on "
            "%s after its attempt ended; rolled back",
            *self._job,
            ", ".join(map(repr, aliases)),
        )

    def end(self) -> list[str]:
        """End the attempt: the aliases counted against it, rolled back."""
        with self._lock:
            self._over = True
            return self._aliases


class Escaped(Exception):
    """Carries a ``BaseException`` that is not an ``Exception`` out of an ``async def`` handler.

    Left alone, asyncio re-raises a task's ``SystemExit`` or ``KeyboardInterrupt`` out of
    the event loop, ending the thread every async handler of the worker runs on, and turns a
    ``CancelledError`` the handler raised itself into a cancelled future that no longer
    names it. Nothing here cancels a handler's task, so each is the handler's own doing.
    """

    def __init__(self, exc: BaseException) -> None:
        super().__init__(repr(exc))
        self.exc = exc


class _Lane(ThreadPoolExecutor):
    """The thread on which one handler thread's async attempts run their thread-sensitive
    ``sync_to_async`` code, with its own database sessions.

    A handler thread runs one attempt at a time, so whatever is open on its lane when an
    attempt returns was left by that attempt and no other: asgiref's one thread shared by
    every async handler would let one handler's leak be found, and blamed, at the end of
    another's attempt, with that other's writes inside it. Each attempt enters its own
    ``ThreadSensitiveContext`` over the lane, which refuses the thread-sensitive calls of
    tasks the attempt left running once it returned, so none lands in a later attempt; a
    call such a task made before is waited for (:func:`_check_lane`).

    The storage of the lane's connections, taken at the first check, is read from the loop
    after each attempt, and the check goes to the lane only when a connection there may
    hold a transaction or a call is still running: an attempt that never used the ORM
    makes no trip to it.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="headgate-async-sync")
        self.storage: dict[str, Any] | None = None
        self._sent = 0  # calls submitted, counted on the loop
        self._ran = 0  # calls finished, counted on the lane before their result is set

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        self._sent += 1
        return super().submit(self._run, fn, *args, **kwargs)

    def _run(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, **kwargs)
        finally:
            self._ran += 1

    def busy(self) -> bool:
        return self._sent != self._ran

    def suspect(self) -> bool:
        return self.busy() or self.storage is None or may_hold_transaction(self.storage)

    def close(self) -> Future[None]:
        """Close the lane's sessions once its calls are done (a handler's code still
        running keeps them until then, or until the process ends), and let it go."""
        # Not counted: every attempt has returned, and this is none of theirs.
        closing = super().submit(_close_sessions)
        self.shutdown(wait=False)
        return closing


async def _check_lane(lane: _Lane, left: Leaks) -> None:
    """Roll back what the attempt that just returned left open on ``lane``, adding the
    aliases to ``left``; again after each check while a task the handler left running
    sent another call there meanwhile, so that none outlives the attempt's context."""
    if not lane.suspect():
        return
    while True:
        found, lane.storage = await sync_to_async(_check_here, thread_sensitive=True)()
        left.add(found)
        if not lane.busy():
            return


#: The :class:`Leaks` of the attempt whose handler runs in this context (see _CheckedPool).
_attempt_left: ContextVar[Leaks | None] = ContextVar("headgate_attempt_left", default=None)


class _CheckedPool(ThreadPoolExecutor):
    """The worker's event loop's default executor: the threads of ``sync_to_async(...,
    thread_sensitive=False)`` (and ``asyncio.to_thread``) code.

    Any of its threads runs any attempt's calls, one after another, so a transaction
    cannot outlive the call that opened it: each call's thread is checked as the call
    returns, there, and what it left open is rolled back and counted against the attempt
    whose task made the call (its context's ``_attempt_left``), never a concurrent one; or
    said, when that attempt is over (:class:`Leaks`).
    """

    def __init__(self, thread_name_prefix: str = "") -> None:
        self._started = itertools.count()  # next() on each new thread: how many there are
        super().__init__(thread_name_prefix=thread_name_prefix, initializer=self._start)

    def _start(self) -> None:
        next(self._started)

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        # Called on the loop, in the context of the task that awaits the call.
        return super().submit(_rolled_back_after, _attempt_left.get(), fn, *args, **kwargs)

    def close(self) -> None:
        """Close the sessions the threads opened, each on its own thread, and let them go.

        One call per thread, each held at a barrier until all have started, so that no
        thread takes two of them while another takes none; a thread still busy with a
        handler's call keeps its sessions, after a second's wait, until the process ends.
        """
        threads = next(self._started)  # the threads started so far
        if threads:
            barrier = threading.Barrier(threads)
            submit = super().submit  # unchecked: these calls are no attempt's
            calls = [submit(_close_then_wait, barrier) for _ in range(threads)]
            wait(calls, timeout=2)
        self.shutdown(wait=False)


def _close_sessions() -> None:
    with contextlib.suppress(DatabaseError):  # a session that failed to close is gone
        connections.close_all()


def _close_then_wait(barrier: threading.Barrier) -> None:
    _close_sessions()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=1)


def _rolled_back_after(left: Leaks | None, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    try:
        return fn(*args, **kwargs)
    finally:
        found = roll_back_left_open()
        if left is not None:
            left.add(found)
        elif found:
            log.warning(
                "code outside any attempt left a transaction open on %s in a "
                "sync_to_async(thread_sensitive=False) call; rolled back",
                ", ".join(found),
            )


def _check_here() -> tuple[list[str], dict[str, Any] | None]:
    return roll_back_left_open(), thread_connection_storage()


async def _contained(coro: Coroutine[Any, Any, Any], left: Leaks, lane: _Lane | None = None) -> Any:
    """Await an ``async def`` handler's coroutine, then roll back the transactions left open
    on the thread its thread-sensitive ``sync_to_async`` code ran on, adding their aliases
    to ``left`` (as its ``thread_sensitive=False`` calls do, call by call: _CheckedPool).

    Django's ORM is sync: an async handler reaches it through ``sync_to_async``. An
    ``atomic()`` a handler entered there and never left (or autocommit it turned off)
    would hold every later write on that thread in a transaction nothing commits, as on a
    sync handler's own thread (``store.sessions``). In a worker that thread is ``lane``,
    the calling handler thread's own; without one (a test helper running one attempt),
    asgiref's thread-sensitive thread.
    """
    _attempt_left.set(left)  # this task's context, which the tasks it starts inherit
    scope = ThreadSensitiveContext(executor=lane) if lane is not None else contextlib.nullcontext()
    async with scope:
        try:
            return await coro
        except Exception:
            raise
        except BaseException as exc:
            raise Escaped(exc) from exc
        finally:
            if lane is not None:
                await _check_lane(lane, left)
            else:
                left.add(await sync_to_async(roll_back_left_open, thread_sensitive=True)())


def run_alone(coro: Coroutine[Any, Any, Any], left: Leaks) -> Any:
    """``coro``'s result, on an event loop of its own (a test helper running one attempt),
    with the same checks as the worker's (:func:`_contained`)."""
    pool = _CheckedPool()
    with asyncio.Runner() as runner:
        runner.get_loop().set_default_executor(pool)
        try:
            return runner.run(_contained(coro, left))
        finally:
            pool.close()

"""A sync handler that returns with a transaction still open (an ``atomic()`` entered and
never left, autocommit turned off) fails its attempt, its writes rolled back: the worker
thread that ran it records that outcome and goes on running jobs on a clean connection."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from django.db import connections, transaction

from headgate_django import task
from headgate_django.worker.runner import Worker
from tests.app import tasks
from tests.app.models import Execution
from tests.app.tasks import record
from tests.integration.helpers import job


def failed_for_the_leak(job_id: str) -> Any:
    """The job's row, once its one attempt failed for the transaction it left open."""
    row = job(job_id)
    assert (row.state, row.attempt) == ("retryable", 1)
    assert "left a transaction open on database 'default'" in row.errors[0]["error"]
    return row


pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@task(kind="test.open-tx.atomic", max_attempts=2)
def leave_atomic_open(ctx, label: str = "") -> None:
    transaction.atomic().__enter__()  # a block the handler never leaves
    record(ctx, label)


@task(kind="test.open-tx.autocommit", max_attempts=2)
def leave_autocommit_off(ctx, label: str = "") -> None:
    transaction.set_autocommit(False)
    record(ctx, label)


@task(kind="test.open-tx.batch", batch_size=2, max_attempts=2)
def leave_atomic_open_in_a_batch(members) -> None:
    transaction.atomic().__enter__()
    for member in members:
        record(member.ctx, "batch")


def run_burst(concurrency: int = 1) -> None:
    """One burst of ``concurrency`` handler threads; a worker wedged by a leaked transaction
    (its outcome writes retried forever) is stopped, so that the test fails instead of
    hanging."""
    worker = Worker(concurrency=concurrency, burst=True, run_duties=False)

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()  # this thread's, which the claim loop used

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(timeout=60)
    if runner.is_alive():
        worker.stop()
        runner.join()
        raise AssertionError("the burst never ended: a handler thread is wedged")


@pytest.mark.parametrize("leaky", [leave_atomic_open, leave_autocommit_off])
def test_a_handler_that_leaves_a_transaction_open_fails_and_the_thread_goes_on(leaky):
    leaked = leaky.enqueue(label="leaked")
    failing = tasks.always_fail.enqueue()
    after = tasks.record_run.enqueue(label="after")
    run_burst()  # one handler thread runs all three, in order
    row = job(leaked)
    assert (row.state, row.attempt) == ("retryable", 1)
    assert "left a transaction open" in row.errors[0]["error"]
    assert job(failing).state == "retryable"
    assert job(after).state == "completed"
    # The leaked transaction's write was rolled back; the next job's committed.
    assert list(Execution.objects.values_list("label", flat=True)) == ["after"]


def test_a_batch_handler_that_leaves_a_transaction_open_fails_every_member():
    members = [leave_atomic_open_in_a_batch.enqueue() for _ in range(2)]
    after = tasks.record_run.enqueue(label="after")
    run_burst()
    for job_id in members:
        row = job(job_id)
        assert (row.state, row.attempt) == ("retryable", 1)
        assert "left a transaction open" in row.errors[0]["error"]
    assert job(after).state == "completed"
    assert list(Execution.objects.values_list("label", flat=True)) == ["after"]


def test_a_thread_that_ran_an_event_loop_is_checked_all_the_same():
    """Once an event loop ran in a thread, asgiref keeps the storage of its async code in
    the same thread-local as the connection wrappers (``cvar``): the check read it as a
    connection and failed the attempt of every job that thread then ran."""

    from asgiref.sync import sync_to_async

    from headgate_django.store.sessions import roll_back_left_open

    def in_a_thread() -> None:
        async def touch() -> None:
            connections["default"]  # a lookup under a running loop
            await sync_to_async(lambda: None)()

        asyncio.run(touch())
        connections["default"].ensure_connection()
        seen.append(roll_back_left_open())
        connections.close_all()

    seen: list[list[str]] = []
    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [[]]


def _enter_atomic() -> None:
    transaction.atomic().__enter__()


def _autocommit_off() -> None:
    transaction.set_autocommit(False)


@task(kind="test.open-tx.async-atomic", max_attempts=2)
async def leave_atomic_open_in_sync_to_async(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(_enter_atomic)()  # on asgiref's one thread-sensitive thread
    await sync_to_async(record)(ctx, label)


@task(kind="test.open-tx.async-autocommit", max_attempts=2)
async def leave_autocommit_off_in_sync_to_async(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(_autocommit_off)()
    await sync_to_async(record)(ctx, label)


@task(kind="test.open-tx.async-record")
async def record_in_sync_to_async(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(record)(ctx, label)


@pytest.mark.parametrize(
    "leaky", [leave_atomic_open_in_sync_to_async, leave_autocommit_off_in_sync_to_async]
)
def test_an_async_handler_that_leaves_a_transaction_open_in_sync_to_async_fails(leaky):
    """``sync_to_async`` runs the ORM code of every async handler on one shared thread:
    a transaction one of them leaves open there is rolled back after its attempt, which
    fails, and the next async handler's writes on that thread commit."""
    # A clean attempt first in claim order: the worker checks the shared thread's
    # connections from its event loop once it has seen that thread, and must still see
    # the leak. (The event loop may finish the two clean ones in either order.)
    before = record_in_sync_to_async.enqueue(label="before")
    leaked = leaky.enqueue(label="leaked")
    after = record_in_sync_to_async.enqueue(label="after")
    run_burst()
    row = failed_for_the_leak(leaked)
    assert "TransactionLeftOpenError" in row.errors[0]["error"]
    assert job(before).state == job(after).state == "completed"
    labels = Execution.objects.values_list("label", flat=True)
    assert sorted(labels) == ["after", "before"]


def _enter_atomic_and_record(ctx, label: str) -> None:
    transaction.atomic().__enter__()
    record(ctx, label)


def _autocommit_off_and_record(ctx, label: str) -> None:
    transaction.set_autocommit(False)
    record(ctx, label)


@task(kind="test.open-tx.async-pool-atomic", max_attempts=2)
async def leave_atomic_open_off_the_shared_thread(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(_enter_atomic_and_record, thread_sensitive=False)(ctx, label)


@task(kind="test.open-tx.async-pool-autocommit", max_attempts=2)
async def leave_autocommit_off_off_the_shared_thread(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(_autocommit_off_and_record, thread_sensitive=False)(ctx, label)


@pytest.mark.parametrize(
    "leaky",
    [leave_atomic_open_off_the_shared_thread, leave_autocommit_off_off_the_shared_thread],
)
def test_an_async_handler_that_leaves_a_transaction_open_off_the_shared_thread_fails(leaky):
    """``sync_to_async(..., thread_sensitive=False)`` runs on the event loop's pool of
    threads, not on the thread-sensitive one: a transaction left open there was never
    seen, and the job that left it completed with its writes uncommitted."""
    leaked = leaky.enqueue(label="leaked")
    after = record_in_sync_to_async.enqueue(label="after")
    run_burst()
    failed_for_the_leak(leaked)
    assert job(after).state == "completed"
    assert list(Execution.objects.values_list("label", flat=True)) == ["after"]


#: What two concurrent async attempts wait for from each other: see the test below.
_turns: dict[str, asyncio.Event] = {}


async def _turn(name: str) -> None:
    await asyncio.wait_for(_turns[name].wait(), timeout=10)


@task(kind="test.open-tx.async-leak-then-wait", max_attempts=2)
async def leak_while_the_other_runs(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await _turn("clean_wrote")  # on SQLite, the transaction would lock the other's write out
    await sync_to_async(_enter_atomic)()
    _turns["leaked"].set()
    await _turn("clean_returned")
    await sync_to_async(record)(ctx, label)  # in the transaction it never leaves


@task(kind="test.open-tx.async-clean-after-leak", max_attempts=2)
async def return_while_the_other_leaks(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(record)(ctx, label)
    _turns["clean_wrote"].set()
    await _turn("leaked")
    _turns["clean_returned"].set()


def test_a_leak_is_blamed_on_the_async_handler_that_left_it_not_on_a_concurrent_one():
    """Two async handlers on the worker's one event loop: the first opens a transaction in
    its ``sync_to_async`` code while the second runs, and returns with it open after the
    second has returned. The leak is the first's: its attempt fails and its write is gone;
    the second, which left nothing open, completes. (On the one thread asgiref shares
    between them, the second's check found the first's transaction and was blamed.)"""
    _turns.clear()
    _turns.update((name, asyncio.Event()) for name in ("clean_wrote", "leaked", "clean_returned"))
    leaked = leak_while_the_other_runs.enqueue(label="leaked")
    clean = return_while_the_other_leaks.enqueue(label="clean")
    run_burst(concurrency=2)  # both run at once, on one event loop
    failed_for_the_leak(leaked)
    assert job(clean).state == "completed"
    assert list(Execution.objects.values_list("label", flat=True)) == ["clean"]


def _sleep_then_enter_atomic() -> None:
    time.sleep(0.5)
    transaction.atomic().__enter__()


_left_running: set[asyncio.Task] = set()  # the tasks below, kept from the garbage collector


@task(kind="test.open-tx.async-detached", max_attempts=2)
async def leave_a_task_running_that_leaks(ctx, label: str = "") -> None:
    from asgiref.sync import sync_to_async

    _left_running.add(asyncio.create_task(sync_to_async(_sleep_then_enter_atomic)()))
    await asyncio.sleep(0.1)  # the call is on its way, and the handler returns


def test_a_call_left_running_by_an_async_handler_is_that_handlers_attempts():
    """A task the handler started and left running has sent a ``sync_to_async`` call that
    opens a transaction after the handler returned: the check of that attempt waits for
    the call, and the next attempt on the same thread is not blamed for it."""
    before = record_in_sync_to_async.enqueue(label="before")  # the thread is known
    leaked = leave_a_task_running_that_leaks.enqueue()
    after = record_in_sync_to_async.enqueue(label="after")
    run_burst()  # one handler thread runs all three, in order
    _left_running.clear()
    failed_for_the_leak(leaked)
    assert job(before).state == job(after).state == "completed"
    assert sorted(Execution.objects.values_list("label", flat=True)) == ["after", "before"]


#: The handshake of the task below with the job after it: see the test.
_after_the_attempt: dict[str, threading.Event] = {}


def _enter_atomic_and_signal() -> None:
    transaction.atomic().__enter__()
    _after_the_attempt["entered"].set()


async def _leak_once_the_attempt_is_over() -> None:
    from asgiref.sync import sync_to_async

    await asyncio.to_thread(_after_the_attempt["over"].wait, 10)
    await sync_to_async(_enter_atomic_and_signal, thread_sensitive=False)()


@task(kind="test.open-tx.async-detached-late")
async def leave_a_task_running_that_leaks_later(ctx) -> None:
    _left_running.add(asyncio.create_task(_leak_once_the_attempt_is_over()))


@task(kind="test.open-tx.after-the-late-leak")
def let_the_task_leak(ctx) -> None:
    _after_the_attempt["over"].set()  # the attempt before this one's returned
    assert _after_the_attempt["entered"].wait(10)


def test_a_transaction_a_task_left_running_opens_after_its_attempt_is_rolled_back_and_said(
    caplog,
):
    """A task the handler started and left running opens a transaction after the attempt
    ended. The attempt succeeded (it is over: its outcome stands) and the transaction is
    rolled back as the call returns; a warning names the job that left the task running,
    so a handler that leaks work is not silent about it (it was)."""
    _after_the_attempt.update(over=threading.Event(), entered=threading.Event())
    leaky = leave_a_task_running_that_leaks_later.enqueue()
    after = let_the_task_leak.enqueue()
    with caplog.at_level(logging.WARNING, logger="headgate_django.worker"):
        run_burst()  # one handler thread runs both, in order
        _left_running.clear()
        deadline = time.monotonic() + 5  # the rollback follows the call's return
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)
    assert job(leaky).state == job(after).state == "completed"
    (record,) = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert f"job {leaky} (test.open-tx.async-detached-late)" in message
    assert "after its attempt ended" in message and "'default'" in message


def test_an_async_attempt_does_not_wait_for_another_handlers_sync_code():
    """Each handler thread's async attempts run their thread-sensitive ``sync_to_async``
    code on a lane of their own: an attempt does not queue behind another handler's long
    call there, as it did on the one thread asgiref shares between them."""
    from asgiref.sync import sync_to_async

    from headgate_django.worker.async_runner import AsyncRunner, Leaks

    async def quick() -> None:
        await sync_to_async(lambda: None)()

    async def slow() -> None:
        await sync_to_async(time.sleep)(2)

    runner = AsyncRunner()
    try:
        busy = threading.Thread(target=runner.run, args=(slow(), Leaks("slow", "test.slow")))
        busy.start()
        time.sleep(0.2)  # the other handler thread's lane is in time.sleep now
        started = time.monotonic()
        left = Leaks("quick", "test.quick")
        runner.run(quick(), left)
        took = time.monotonic() - started
        busy.join()
    finally:
        runner.close()
    assert left.end() == []
    assert took < 1.0, f"the attempt waited {took:.1f} s for another handler's sync code"

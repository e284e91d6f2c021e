"""``enqueue_and_wait`` without a worker: bad input, transactions, timeouts, and (on
PostgreSQL) which finishes notify the waiter's channel. With real workers:
tests/integration/test_enqueue_and_wait.py."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection, transaction

from headgate_django import Envelope, testing
from headgate_django.exceptions import WaitInTransactionError, WaitTimeoutError
from headgate_django.models import Job
from headgate_django.store.waits import FINISHED_CHANNEL, job_mark_awaited, job_outcome
from headgate_django.waiting import enqueue_and_wait
from tests.app import tasks
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_inside_an_atomic_block_it_refuses_and_enqueues_nothing():
    with transaction.atomic(), pytest.raises(WaitInTransactionError, match="after the commit"):
        tasks.noop.enqueue_and_wait(timeout=1)
    assert Job.objects.count() == 0


def test_the_function_form_refuses_inside_an_atomic_block_too():
    with transaction.atomic(), pytest.raises(WaitInTransactionError):
        enqueue_and_wait(tasks.noop.envelope(), timeout=1)


@pytest.mark.parametrize(
    ("envelope", "timeout", "error"),
    [
        ("test.noop", 1, TypeError),
        (Envelope(kind="test.noop"), -1, ValueError),
        # Compares false with everything: it would have meant a wait without end.
        (Envelope(kind="test.noop"), float("nan"), ValueError),
        (Envelope(kind="test.noop"), "5", TypeError),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(envelope, timeout, error):
    with pytest.raises(error):
        enqueue_and_wait(envelope, timeout=timeout)
    assert Job.objects.count() == 0


def test_a_timeout_says_so_and_leaves_the_job_queued():
    with pytest.raises(WaitTimeoutError) as caught:
        tasks.echo.enqueue_and_wait(value=1, timeout=0.2)
    err = caught.value
    assert isinstance(err, TimeoutError)
    assert err.state == "available"
    assert err.job_id in str(err)
    assert Job.objects.get(pk=err.job_id).state == "available"
    # The job runs later as any other.
    assert testing.run_one() == (err.job_id, "completed")


def test_the_async_form_times_out_the_same_way():
    with pytest.raises(WaitTimeoutError):
        asyncio.run(tasks.echo.aenqueue_and_wait(value=1, timeout=0.1))


def test_many_async_waits_at_once_each_start_and_a_cancelled_one_stops():
    """More waits than a thread pool of a small machine holds (six on two cores): each
    enqueues its job at once instead of queueing behind another's wait (whose timeout would
    start late), and each caller's cancellation ends its thread's wait."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    waits = [
        asyncio.run_coroutine_threadsafe(tasks.echo.aenqueue_and_wait(value=n, timeout=20), loop)
        for n in range(10)
    ]
    try:
        wait_for(lambda: Job.objects.filter(kind="test.echo").count() == 10, timeout=10)
    finally:
        for wait in waits:
            wait.cancel()
        wait_for(lambda: not any(t.name == "headgate-wait" for t in threading.enumerate()), 5)
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()
    assert Job.objects.filter(kind="test.echo", state="available").count() == 10


def test_outcomes_read_back_with_result_and_last_error():
    ok = tasks.echo.enqueue(value=5)
    bad = tasks.always_fail.enqueue(message="nope")
    gone = tasks.ephemeral.enqueue()
    testing.run_jobs(include_scheduled=True)
    assert job_outcome(ok) == ("completed", {"value": 5, "attempt": 1}, None)
    state, result, error = job_outcome(bad)
    assert (state, result) == ("archived", None)
    assert "nope" in error
    assert job_outcome(gone).state == "deleted"
    assert job_outcome(gone).finished


@pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY: PostgreSQL only")
def test_only_awaited_jobs_notify_when_they_finish():
    import psycopg

    plain = tasks.echo.enqueue(value=1)
    awaited = tasks.echo.enqueue(value=2)
    deleted = tasks.ephemeral.enqueue()
    job_mark_awaited(awaited)
    job_mark_awaited(deleted)
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {FINISHED_CHANNEL}")
        testing.run_jobs()
        heard = [n.payload for n in listener.notifies(timeout=1.0)]
    assert sorted(heard) == sorted([awaited, deleted])
    assert plain not in heard

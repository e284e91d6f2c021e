"""``enqueue_and_wait`` against a real ``runworkers`` process."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.db import connection

from headgate_django import waiting
from headgate_django.exceptions import WaitTimeoutError
from headgate_django.models import Job
from tests.app import runtime_tasks as rt
from tests.app import tasks
from tests.conftest import POOLER_BYPASS, wait_for
from tests.integration.helpers import FAST, headgate_env, state_is, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(start_worker):
    w = start_worker("--concurrency", "4", env=headgate_env(**FAST))
    wait_serving(w)
    return w


def test_it_returns_the_result_of_the_finished_job(worker):
    result = rt.wait_sleep.enqueue_and_wait(seconds=0.2, value="x", timeout=60)
    assert result.ok
    assert result.state == "completed"
    assert result.result == {"slept": 0.2, "value": "x"}
    assert result.error is None
    assert Job.objects.get(pk=result.job_id).state == "completed"


def test_a_failed_job_returns_its_state_and_last_error(worker):
    result = tasks.always_fail.enqueue_and_wait(message="no stock", timeout=60)
    # max_attempts=3 with the default backoff: the first failure makes it retryable, and
    # the wait goes on until the last attempt archives it (promote runs every 0.2 s here).
    assert (result.state, result.ok, result.result) == ("archived", False, None)
    assert "no stock" in result.error


def test_a_timeout_leaves_the_job_running(worker):
    with pytest.raises(WaitTimeoutError) as caught:
        rt.wait_sleep.enqueue_and_wait(seconds=3, timeout=0.5)
    assert caught.value.state in ("available", "running")
    wait_for(lambda: state_is(caught.value.job_id, "completed"), timeout=60)


def test_concurrent_async_waits_do_not_queue_behind_each_other(worker):
    async def both():
        return await asyncio.gather(
            rt.wait_sleep.aenqueue_and_wait(seconds=1.0, value=1, timeout=60),
            rt.wait_sleep.aenqueue_and_wait(seconds=1.0, value=2, timeout=60),
        )

    try:
        first, second = asyncio.run(both())
    except WaitTimeoutError as exc:  # say what the worker did meanwhile
        raise AssertionError(f"{exc}\n{worker.output()}") from exc
    assert (first.result["value"], second.result["value"]) == (1, 2)
    assert first.ok and second.ok


@pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY: PostgreSQL only")
@pytest.mark.skipif(
    bool(POOLER_BYPASS), reason="this process LISTENs through the pooler: it polls (documented)"
)
def test_postgresql_wakes_the_waiter_by_notification(worker, monkeypatch):
    """With the periodic read pushed out to a minute, only the notification can end the wait
    within the timeout; the acceptance bound (0.5 s job back in < 0.6 s) is measured by
    benchmarks/wait.py."""
    monkeypatch.setattr(waiting, "RECONCILE_INTERVAL", 60.0)
    started = time.monotonic()
    result = rt.wait_sleep.enqueue_and_wait(seconds=0.5, timeout=30)
    took = time.monotonic() - started
    assert result.ok
    assert Job.objects.get(pk=result.job_id).awaited
    assert took < 30  # the wait ended long before its first periodic read

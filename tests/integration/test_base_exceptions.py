"""Under ``runworkers``, a handler's ``SystemExit`` or ``KeyboardInterrupt`` fails its
attempt and the worker goes on with the same threads; ``os._exit`` ends the process and
stays a crash, charged when the lease lapses. A handler thread that dies anyway is noticed,
its job failed and the thread replaced."""

from __future__ import annotations

import threading

import pytest

from headgate_django.worker.runner import Worker
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, job, runs, state_is, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_burst_worker_fails_each_attempt_keeps_its_thread_and_exits(start_worker):
    failing = [
        tasks.base_exit.enqueue(name="SystemExit"),
        tasks.base_exit.enqueue(name="KeyboardInterrupt"),
        tasks.async_base_exit.enqueue(name="SystemExit"),
        tasks.async_base_exit.enqueue(name="CancelledError"),
    ]
    after = [tasks.echo.enqueue(value=n) for n in range(3)]
    worker = start_worker("--burst", "--concurrency", "1", env=headgate_env(**FAST))
    assert worker.proc.wait(timeout=60) == 0, worker.output()
    for job_id in failing:
        row = job(job_id)
        assert (row.state, row.attempt, row.crash_attempt) == ("retryable", 1, 0)
        assert row.errors[0]["kind"] == "error"
        assert "raised by the handler" in row.errors[0]["traceback"]
    # One handler thread ran everything: it outlived each of those exceptions.
    assert [job(job_id).state for job_id in after] == ["completed"] * 3


def test_os_exit_in_a_handler_is_a_crash(start_worker):
    env = headgate_env(**FAST)
    keeper = start_worker("--queue", "keeper-only", "--lease-ttl", "1", env=env)
    wait_serving(keeper)  # its duties reclaim the lease; a loaded machine starts it slowly
    job_id = tasks.hard_exit.enqueue()
    victim = start_worker("--no-duties", "--lease-ttl", "1", env=env)
    assert victim.proc.wait(timeout=120) == 3, victim.output()
    assert [e.label for e in runs(job_id)] == ["hard_exit"]
    try:
        wait_for(lambda: job(job_id).crash_attempt == 1, timeout=60)
    except AssertionError as exc:  # the keeper's log says why its reclaim did not run
        row = job(job_id)
        seen = f"state={row.state} crash_attempt={row.crash_attempt} lease={row.lease_expires_at}"
        raise AssertionError(f"{exc}; {seen}; keeper:\n{keeper.output()}") from None
    row = job(job_id)
    assert row.attempt == 0
    assert row.state in ("retryable", "available")
    assert [e["kind"] for e in row.errors] == ["crash"]
    assert keeper.terminate() == 0


def test_a_handler_thread_that_dies_is_replaced_and_its_job_failed():
    job_id = tasks.echo.enqueue(value=1)
    worker = Worker(concurrency=1, burst=True, run_duties=False)
    [claimed] = worker._claim(1)
    worker._hold(claimed)

    def take_and_vanish() -> None:  # a thread gone while it held a job, for whatever reason
        assert worker._begin(worker._buffer.get())

    doomed = threading.Thread(target=take_and_vanish, name="headgate-job-0")
    worker._handlers[0] = doomed
    doomed.start()
    doomed.join()

    worker._replace_dead_handlers()
    row = job(job_id)
    assert (row.state, row.attempt) == ("retryable", 1)
    assert "handler thread headgate-job-0 died" in row.errors[0]["error"]
    fresh = worker._handlers[0]
    assert fresh is not doomed and fresh.is_alive()
    assert not worker._held

    second = tasks.echo.enqueue(value=2)  # the new thread runs the next job
    [claimed] = worker._claim(1)
    worker._hold(claimed)
    wait_for(lambda: not worker._acks.empty())
    worker._buffer.put(None)
    fresh.join(timeout=10)
    assert state_is(second, "running")  # its success waits for the acker, as ever

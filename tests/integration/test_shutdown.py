"""Graceful drain on SIGTERM: in-flight handlers finish inside the drain window; what
cannot finish is handed back without charging a crash."""

from __future__ import annotations

import signal

import pytest

from headgate_django.models import DutyLease
from headgate_django.worker.duties import Duty, DutyRunner
from headgate_django.worker.runner import Worker
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import headgate_env, job, runs

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_sigterm_lets_in_flight_handlers_finish(start_worker):
    ids = [tasks.sleeper.enqueue(seconds=1.5, label=f"drain-{i}") for i in range(3)]
    worker = start_worker("--concurrency", "2")
    wait_for(lambda: Execution.objects.filter(label__startswith="start:").count() == 2)

    assert worker.terminate() == 0

    started = {e.job_id for e in Execution.objects.filter(label__startswith="start:")}
    assert len(started) == 2
    for job_id in started:
        row = job(job_id)
        assert (row.state, row.attempt, row.crash_attempt) == ("completed", 0, 0)
        assert row.result == "slept"
        assert [e.label.split(":")[0] for e in runs(job_id)] == ["start", "end"]
    (waiting,) = set(ids) - started  # no new claim once the drain began
    row = job(waiting)
    assert (row.state, row.fence, row.attempt, row.crash_attempt) == ("available", 0, 0, 0)
    assert "draining 2 in-flight job(s)" in worker.output()


def test_handler_outliving_the_drain_window_is_released_uncharged(start_worker):
    job_id = tasks.sleeper.enqueue(seconds=60, label="too-long")
    worker = start_worker(env=headgate_env(SHUTDOWN_TIMEOUT=0.5))
    wait_for(lambda: runs(job_id))

    worker.proc.send_signal(signal.SIGTERM)
    # Exits once the window has passed, without waiting for the handler.
    assert worker.proc.wait(timeout=20) == 0

    row = job(job_id)
    assert (row.state, row.attempt, row.crash_attempt) == ("available", 0, 0)
    assert row.lease_id is None and row.lease_expires_at is None
    assert row.errors == []
    assert [e.label for e in runs(job_id)] == ["start:too-long"]
    assert "released 1 unfinished job(s)" in worker.output()


def test_a_stop_asked_for_lets_the_running_duty_finish_and_begins_no_other():
    ran: list[str] = []
    worker = Worker(concurrency=1)

    def first() -> dict:
        ran.append("first")
        worker.stop()  # SIGTERM arrives while this duty runs
        return {}

    def second() -> dict:
        ran.append("second")
        return {}

    worker._duties = DutyRunner(
        worker.worker_id, [Duty("t-first", 0.0, first), Duty("t-second", 0.0, second)]
    )
    worker.run()
    assert ran == ["first"]
    assert DutyLease.objects.filter(holder=worker.worker_id).count() == 0  # all released


def test_a_burst_that_ran_out_of_jobs_finishes_its_pass_over_the_duties():
    ran: list[str] = []
    worker = Worker(burst=True, concurrency=1)
    claim = worker._claim

    def claim_once_the_pass_began(limit: int):  # the burst cannot end before the pass starts
        wait_for(lambda: "first" in ran)
        return claim(limit)

    def first() -> dict:
        ran.append("first")
        wait_for(worker._stopping.is_set)  # the burst ends while this duty runs
        return {}

    def second() -> dict:
        ran.append("second")
        return {}

    worker._claim = claim_once_the_pass_began  # type: ignore[method-assign]
    worker._duties = DutyRunner(
        worker.worker_id, [Duty("t-first", 0.0, first), Duty("t-second", 0.0, second)]
    )
    worker.run()
    assert ran == ["first", "second"]


def test_sighup_drains_like_sigterm_and_a_second_one_does_not_cut_it_short(start_worker):
    """A closing terminal sends SIGHUP, often twice (its shell passes one on, and the kernel
    sends another as the shell exits): the worker drains as on SIGTERM, to the end."""
    job_id = tasks.sleeper.enqueue(seconds=1.5, label="hup")
    worker = start_worker("--concurrency", "1")
    wait_for(lambda: runs(job_id))

    worker.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "received SIGHUP: draining" in worker.output())
    worker.proc.send_signal(signal.SIGHUP)
    assert worker.proc.wait(timeout=60) == 0, worker.output()

    row = job(job_id)
    assert (row.state, row.attempt, row.crash_attempt) == ("completed", 0, 0)
    assert [e.label.split(":")[0] for e in runs(job_id)] == ["start", "end"]
    assert "send SIGTERM to exit at once" in worker.output()
    assert "received SIGHUP again: still draining" in worker.output()


def test_a_worker_started_with_sighup_ignored_keeps_ignoring_it(worker_env, tmp_path):
    """``nohup manage.py runworkers``: the worker was asked to outlive its terminal."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    log = tmp_path / "worker.log"
    with log.open("wb") as handle:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworkers", "--concurrency", "1"],
            env=worker_env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
        )
    try:
        wait_for(lambda: " serving " in log.read_text())
        proc.send_signal(signal.SIGHUP)
        job_id = tasks.record_run.enqueue(label="after-hup")
        wait_for(lambda: job(job_id).state == "completed")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()

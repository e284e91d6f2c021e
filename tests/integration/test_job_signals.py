"""Job signals in a real ``runworkers`` process: sent there, after the commit, and a
receiver that raises leaves the job's outcome alone (receivers: tests/app/runtime_tasks)."""

from __future__ import annotations

import os

import pytest

from tests.app import runtime_tasks as rt
from tests.integration.helpers import job, runs

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_signals_are_sent_in_the_worker_and_a_raising_receiver_changes_nothing(start_worker):
    raising = rt.signals_raise.enqueue()
    ok = rt.signals_ok.enqueue(value=3)
    failing = rt.signals_fail.enqueue()
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.proc.wait(timeout=120) == 0, worker.output()
    assert job(raising).state == "completed"
    assert job(raising).result == "done"
    assert job(ok).state == "completed"
    assert "a receiver that always fails" in worker.output()
    for job_id in (raising, ok):
        [record] = runs(job_id)
        assert (record.label, record.attempt) == ("job_finished:completed", 1)
        assert record.pid == worker.pid != os.getpid()
    # The failing task's backoff outlasts a burst: one attempt, retried.
    assert [(r.label, r.attempt) for r in runs(failing)] == [("job_retried:retryable", 1)]

"""Several worker processes on one database: every job runs exactly once."""

from __future__ import annotations

from collections import Counter

import pytest

from headgate_django import enqueue
from headgate_django.models import Job
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

JOBS = 2000


def test_two_processes_drain_2000_jobs_each_exactly_once(start_worker):
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    for worker in workers:
        wait_serving(worker)
    ids: list[str] = []
    for start in range(0, JOBS, 1000):
        batch = [tasks.record_run.envelope(label=f"bulk-{i}") for i in range(start, start + 1000)]
        ids += enqueue(batch)

    def all_completed() -> bool:
        return Job.objects.filter(kind="test.record", state="completed").count() == JOBS

    wait_for(all_completed, timeout=90, interval=0.25)
    for worker in workers:
        assert worker.terminate() == 0

    jobs = Job.objects.filter(kind="test.record")
    assert set(jobs.values_list("id", flat=True)) == set(ids)
    assert set(jobs.values_list("state", "fence", "attempt", "crash_attempt")) == {
        ("completed", 1, 0, 0)
    }
    per_job = Counter(Execution.objects.values_list("job_id", flat=True))
    assert set(per_job) == set(ids)
    assert set(per_job.values()) == {1}
    assert set(Execution.objects.values_list("fence", flat=True)) == {1}
    assert set(Execution.objects.values_list("pid", flat=True)) == {w.pid for w in workers}

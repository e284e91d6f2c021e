"""A worker renews its leases on time however long its maintenance pass takes: renewals
and duties share the heartbeat thread, and a renewal that comes due is made between two
duties, not after the whole pass."""

from __future__ import annotations

import pytest

from headgate_django import enqueue
from headgate_django.models import DutyLease
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, job, runs, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_pass_of_slow_duties_longer_than_the_lease_does_not_let_it_lapse(start_worker):
    # The reclaim duty belongs to a worker that serves another queue. The job's worker
    # holds a 1 s lease, renewed every 1/3 s, and runs three extra duties of 0.4 s on
    # each heartbeat: one pass lasts longer than the lease. Renewed only once per pass,
    # the lease would lapse for a moment every pass, and the reclaim would take the job
    # while its handler still runs, charge it a crash and run it again.
    settings = headgate_env(LEASE_TTL=1, **FAST)
    reclaimer = start_worker("--queue", "elsewhere", env=settings)
    wait_for(lambda: DutyLease.objects.filter(name="reclaim").exclude(holder="").exists())
    [job_id] = enqueue(tasks.sleeper.envelope(seconds=3, label="long"))
    worker = start_worker(
        "--concurrency", "1", env={**settings, "HEADGATE_TEST_SLOW_DUTIES": "3:0.4"}
    )
    wait_for(lambda: state_is(job_id, "completed"), timeout=30)
    row = job(job_id)
    assert (row.fence, row.attempt, row.crash_attempt, row.errors) == (1, 0, 0, [])
    assert [(r.label, r.fence) for r in runs(job_id)] == [("start:long", 1), ("end:long", 1)]
    assert worker.terminate() == 0
    assert reclaimer.terminate() == 0

"""kill -9 of a worker mid-job: the lease lapses, the crash is charged, the job runs again
elsewhere; three crashes quarantine the fingerprint."""

from __future__ import annotations

import pytest

from headgate_django import QuarantinedError
from headgate_django.models import Quarantine
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, job, runs, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_killed_worker_job_is_reclaimed_and_completed_by_another(start_worker):
    env = headgate_env(**FAST)
    job_id = tasks.crash_once.enqueue(marker="kill-once")
    victim = start_worker("--no-duties", "--lease-ttl", "1", env=env)
    wait_for(lambda: runs(job_id))
    victim.kill()

    rescuer = start_worker("--lease-ttl", "1", env=env)
    wait_for(lambda: state_is(job_id, "completed"))

    row = job(job_id)
    assert row.crash_attempt == 1
    assert row.attempt == 0
    assert row.result == {"recovered_after": 1}
    assert [e["kind"] for e in row.errors] == ["crash"]
    assert "stopped renewing" in row.errors[0]["error"]
    executions = runs(job_id)
    assert [e.label for e in executions] == ["crash_attempt:0", "crash_attempt:1"]
    assert [e.pid for e in executions] == [victim.pid, rescuer.pid]
    assert [e.fence for e in executions] == [1, 2]
    assert rescuer.terminate() == 0


def test_three_crashes_quarantine_the_fingerprint(start_worker):
    env = headgate_env(**FAST)
    # Runs the maintenance duties (reclaim, promote) but serves a queue nobody uses, so
    # only the workers killed below ever run the job.
    keeper = start_worker("--queue", "keeper-only", env=env)
    job_id = tasks.crashy.enqueue(marker="poison")
    victims = []
    for n in (1, 2, 3):
        victim = start_worker("--no-duties", "--lease-ttl", "1", env=env)
        wait_for(lambda n=n: len(runs(job_id)) == n)
        victim.kill()
        victims.append(victim.pid)

    wait_for(lambda: state_is(job_id, "quarantined"))
    row = job(job_id)
    assert row.crash_attempt == 3
    assert row.attempt == 0
    assert [e["kind"] for e in row.errors] == ["crash"] * 3
    assert [e.pid for e in runs(job_id)] == victims
    quarantine = Quarantine.objects.get(fingerprint=row.fingerprint)
    assert quarantine.kind == "test.crashy"
    assert quarantine.crash_count == 3
    assert quarantine.sample_job_id == job_id

    with pytest.raises(QuarantinedError):
        tasks.crashy.enqueue(marker="poison")
    tasks.crashy.enqueue(marker="another payload")  # only that fingerprint is refused
    assert keeper.terminate() == 0

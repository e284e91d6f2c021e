"""The worker's claim buffer: jobs claimed beyond the free handler slots wait in the worker,
leased like running ones, until a handler thread takes them."""

from __future__ import annotations

import pytest

from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, job, runs, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_one_claim_takes_a_whole_batch_beyond_the_free_slots(start_worker):
    first = tasks.sleeper.enqueue(seconds=1.5, label="first")
    queued = [tasks.noop.enqueue() for _ in range(4)]
    worker = start_worker("--concurrency", "1", env=headgate_env(CLAIM_BATCH=10))
    wait_for(lambda: runs(first))
    # One handler thread, yet every job was claimed by the same claim (one lease).
    leases = {job(job_id).lease_id for job_id in [first, *queued]}
    assert len(leases) == 1 and None not in leases
    assert all(runs(job_id) == [] for job_id in queued)
    wait_for(lambda: all(state_is(job_id, "completed") for job_id in queued))
    assert worker.terminate() == 0


def test_buffered_jobs_are_renewed_while_they_wait(start_worker):
    # A 1 s lease and maintenance every 0.2 s: a buffered job whose lease were not renewed
    # would be reclaimed as a crash long before the 4 s handler ahead of it lets it start.
    blocker = tasks.sleeper.enqueue(seconds=4, label="blocker")
    waiting = tasks.sleeper.enqueue(seconds=0, label="waiting")
    worker = start_worker("--concurrency", "1", env=headgate_env(LEASE_TTL=1, **FAST))
    wait_for(lambda: runs(blocker))
    claimed_until = job(waiting).lease_expires_at
    wait_for(lambda: job(waiting).lease_expires_at > claimed_until, timeout=5)
    wait_for(lambda: state_is(waiting, "completed"), timeout=30)
    for job_id in (blocker, waiting):
        row = job(job_id)
        assert (row.fence, row.attempt, row.crash_attempt) == (1, 0, 0)
    assert worker.terminate() == 0

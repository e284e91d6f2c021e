"""The worker's claim buffer: while jobs are short, a claim takes more than the free handler
slots, and the extra jobs wait in the worker, leased like running ones (see
``headgate_django.worker.claim_size``)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from headgate_django import enqueue
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, job, runs, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _short_jobs_then_a_blocker(blocked: int) -> tuple[str, list[str]]:
    """Five quick jobs first (they teach the worker its jobs are short), then a 3 s
    handler, then ``blocked`` jobs with a 0.5 s timeout that will wait behind it."""
    enqueue([dataclasses.replace(tasks.noop.envelope(), priority=10) for _ in range(5)])
    [blocker] = enqueue(
        dataclasses.replace(tasks.sleeper.envelope(seconds=3, label="blocker"), priority=5)
    )
    waiting = enqueue(
        [
            dataclasses.replace(tasks.noop.envelope(), timeout=timedelta(milliseconds=500))
            for _ in range(blocked)
        ]
    )
    return blocker, waiting


def _buffered_behind(blocker: str, waiting: list[str]) -> bool:
    """The blocker runs and every waiting job is held by the same claim, not started."""
    lease = job(blocker).lease_id
    return all(
        state_is(job_id, "running") and job(job_id).lease_id == lease and not runs(job_id)
        for job_id in waiting
    )


def test_buffered_jobs_are_renewed_and_time_out_only_once_started(start_worker):
    # A 1 s lease and maintenance every 0.2 s: a buffered job whose lease were not renewed
    # would be reclaimed as a crash while the 3 s handler ahead of it runs, and one whose
    # 0.5 s timeout counted from the claim would time out before it even started.
    blocker, waiting = _short_jobs_then_a_blocker(3)
    worker = start_worker(
        "--concurrency", "1", env=headgate_env(LEASE_TTL=1, CLAIM_BATCH=20, **FAST)
    )
    wait_for(lambda: runs(blocker))
    assert _buffered_behind(blocker, waiting)
    claimed_until = job(waiting[0]).lease_expires_at
    wait_for(lambda: (job(waiting[0]).lease_expires_at or claimed_until) > claimed_until, timeout=5)
    wait_for(lambda: all(state_is(job_id, "completed") for job_id in waiting), timeout=30)
    for job_id in (blocker, *waiting):
        row = job(job_id)
        assert (row.fence, row.attempt, row.crash_attempt, row.errors) == (1, 0, 0, [])
    assert worker.terminate() == 0


def test_sigterm_hands_buffered_jobs_back_at_once_uncharged(start_worker):
    blocker, waiting = _short_jobs_then_a_blocker(3)
    worker = start_worker("--concurrency", "1", env=headgate_env(CLAIM_BATCH=20))
    wait_for(lambda: runs(blocker))
    assert _buffered_behind(blocker, waiting)

    assert worker.terminate() == 0

    assert state_is(blocker, "completed")  # the running handler got its drain window
    for job_id in waiting:
        row = job(job_id)
        assert (row.state, row.fence, row.attempt, row.crash_attempt) == ("available", 1, 0, 0)
        assert row.lease_id is None and row.errors == [] and runs(job_id) == []
    output = worker.output()
    assert output.index("released 3 buffered job(s)") < output.index("draining 1 in-flight")


def test_a_claim_loop_waiting_for_room_is_woken_once_there_is_enough():
    """A claim loop that found no room sleeps until a handler's finished job makes room,
    not until that job's batched ack lands: the handlers would sit idle meanwhile."""
    from headgate_django.worker.claim_size import BUFFER_BATCHES
    from headgate_django.worker.runner import Worker

    worker = Worker(concurrency=10, burst=True, run_duties=False)
    worker._sizer.observe(0.0001)  # short jobs: a full buffer beyond the slots
    worker._busy, worker._waiting = 10, BUFFER_BATCHES * worker._sizer.batch
    assert worker._claim_size() == 0
    freed = 0
    while not worker._wake.is_set():
        worker._waiting -= 1  # a handler takes the next buffered job
        worker._busy += 1
        worker._slot_freed()  # and finishes the one it had
        freed += 1
    # Woken at the low-water mark, when half a batch fits, not at the first free slot.
    assert freed == worker._sizer.batch // 2
    assert worker._claim_size() == freed

    worker._wake.clear()
    worker._slot_freed()  # the loop is not waiting for room: nothing to wake
    assert not worker._wake.is_set()

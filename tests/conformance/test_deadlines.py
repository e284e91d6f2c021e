"""Deadlines: past its deadline (store clock) a job is archived with reason
``deadline_exceeded``, whether it waits (the duty), was just claimed (never run), or runs
(its next renewal or fenced write); no attempt is charged. Bad deadlines write nothing."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta

import pytest

from headgate_django import store, task
from headgate_django.context import JobContext
from headgate_django.exceptions import DeadlineExceededError, DefinitionError, LeaseLostError
from headgate_django.models import Job
from headgate_django.store.deadlines import job_archive_past_deadline
from headgate_django.worker.duties import DutyRunner, default_duties
from tests.conformance.helpers import LONG, WORKER, claim, enqueue_job, envelope, row, state_of

pytestmark = pytest.mark.django_db

SOON = timedelta(milliseconds=150)


def _past(span: timedelta = SOON) -> None:
    time.sleep(span.total_seconds() + 0.1)


def _archived_for_deadline(job_id: str) -> dict:
    after = row(job_id)
    assert after["state"] == "archived"
    assert after["errors"][-1]["kind"] == "deadline_exceeded"
    assert after["attempt"] == 0 and after["crash_attempt"] == 0
    assert after["lease_id"] is None and after["finalized_at"] is not None
    return after


def test_a_span_is_counted_from_enqueue_on_the_store_clock():
    job_id = enqueue_job(deadline=timedelta(hours=1))
    after = row(job_id)
    span = after["deadline"] - after["enqueued_at"]
    assert abs(span - timedelta(hours=1)) < timedelta(seconds=1)


def test_an_instant_is_kept_as_given():
    at = datetime(2099, 1, 1, tzinfo=UTC)
    assert row(enqueue_job(deadline=at))["deadline"] == at


def test_the_duty_archives_waiting_jobs_past_their_deadline():
    waiting = enqueue_job(deadline=SOON, delay=timedelta(hours=1))
    later = enqueue_job(deadline=timedelta(hours=1))
    plain = enqueue_job()
    _past()
    assert waiting in job_archive_past_deadline()
    _archived_for_deadline(waiting)
    assert state_of(later) == "available" and state_of(plain) == "available"


def test_the_duty_runs_in_the_worker_duties():
    job_id = enqueue_job(deadline=SOON, pending=True)
    _past()
    DutyRunner("deadliner", [d for d in default_duties() if d.name == "deadlines"]).tick()
    _archived_for_deadline(job_id)


def test_a_claimed_job_past_its_deadline_is_archived_unrun():
    job_id = enqueue_job(deadline=datetime(2000, 1, 1, tzinfo=UTC))
    queue = row(job_id)["queue"]
    assert store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG, queues=[queue]) == []
    _archived_for_deadline(job_id)


def test_a_claim_returns_the_rest_of_its_jobs():
    queue = "deadline-mixed"
    store.job_insert_many(
        [
            envelope(queue=queue, deadline=datetime(2000, 1, 1, tzinfo=UTC)),
            envelope(queue=queue, deadline=timedelta(hours=1)),
            envelope(queue=queue),
        ]
    )
    claimed = store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG, queues=[queue])
    assert len(claimed) == 2
    assert sorted(c.deadline is None for c in claimed) == [False, True]


def test_a_running_attempt_is_stopped_at_its_next_fenced_write():
    job_id = enqueue_job(deadline=SOON)
    claimed = claim(job_id)
    ctx = JobContext(claimed)
    assert ctx.deadline is not None and not ctx.deadline_exceeded
    ctx.set_progress(1, 2)  # before the deadline: lands
    _past()
    with pytest.raises(DeadlineExceededError):
        ctx.set_progress(2, 2)
    assert ctx.cancelled and ctx.deadline_exceeded
    _archived_for_deadline(job_id)
    assert row(job_id)["progress"]["current"] == 1


def test_a_running_attempt_is_stopped_at_its_next_renewal():
    job_id = enqueue_job(deadline=SOON)
    plain = enqueue_job()
    refs = [claim(job_id).ref, claim(plain).ref]
    _past()
    assert store.job_renew_leases(refs, lease_ttl=LONG) == {job_id}
    _archived_for_deadline(job_id)
    assert state_of(plain) == "running"


def test_a_lost_lease_is_not_a_deadline():
    job_id = enqueue_job(deadline=timedelta(hours=1))
    ref = claim(job_id).ref
    store.job_cancel(job_id)
    with pytest.raises(LeaseLostError) as caught:
        store.job_save_progress(ref, {"current": 1, "total": 1})
    assert not isinstance(caught.value, DeadlineExceededError)


def test_an_idempotent_repeat_keeps_the_first_deadline():
    env = envelope(id="deadline-repeat", deadline=timedelta(hours=1))
    store.job_insert_many([env])
    first = row("deadline-repeat")["deadline"]
    store.job_insert_many([dataclasses.replace(env, deadline=timedelta(hours=5))])
    assert row("deadline-repeat")["deadline"] == first


BAD = {
    "naive": datetime(2099, 1, 1),
    "zero-span": timedelta(0),
    "negative-span": timedelta(seconds=-1),
    "a-number": 30,
}


@pytest.mark.parametrize("deadline", BAD.values(), ids=BAD.keys())
def test_bad_deadlines_are_refused_and_write_nothing(deadline):
    before = Job.objects.count()
    with pytest.raises(DefinitionError, match="deadline"):
        store.job_insert_many([envelope(), envelope(deadline=deadline)])
    assert Job.objects.count() == before


def test_a_task_deadline_is_a_span_checked_at_decoration():
    @task(kind="test.deadlined", deadline=timedelta(minutes=5))
    def deadlined(ctx):
        return None

    assert row(deadlined.enqueue())["deadline"] is not None
    with pytest.raises(DefinitionError):

        @task(kind="test.bad-deadline", deadline=datetime(2099, 1, 1, tzinfo=UTC))
        def bad(ctx):
            return None


def test_a_dead_workers_job_past_its_deadline_is_archived_not_charged_a_crash():
    job_id = enqueue_job(deadline=SOON)
    claim(job_id, lease_ttl=timedelta(milliseconds=1))
    _past()
    report = store.job_reclaim_expired()
    assert job_id not in report.retried and job_id not in report.quarantined
    _archived_for_deadline(job_id)

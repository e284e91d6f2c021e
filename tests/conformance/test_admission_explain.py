"""``admission.explain`` names the rule that holds a job back, with its numbers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headgate_django import admission, store
from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.states import State
from tests.conformance.helpers import (
    LONG,
    WORKER,
    enqueue_job,
    fresh_queue,
    job_in_state,
)

pytestmark = pytest.mark.django_db


def claim(queue: str):
    return store.job_claim(worker_id=WORKER, limit=10, lease_ttl=LONG, queues=[queue])


def test_an_unhindered_job_is_admissible():
    verdict = admission.explain(enqueue_job())
    assert (verdict.admissible, verdict.blocked_by, verdict.estimated_admission_ms) == (
        True,
        None,
        0,
    )


def test_rate_class_with_the_wait():
    q = fresh_queue()
    admission.set_rate_class("explain-rc", limit=1, window=timedelta(seconds=60))
    both = {enqueue_job(queue=q, rate_class="explain-rc") for _ in range(2)}
    (taken,) = [job.ref.job_id for job in claim(q)]
    (waiting,) = both - {taken}  # either may go first: ids of one millisecond
    verdict = admission.explain(waiting)
    assert (verdict.admissible, verdict.blocked_by) == (False, "rate_class")
    assert verdict.detail["rate_class"] == "explain-rc" and verdict.detail["needed"] == 1
    assert 0 < verdict.estimated_admission_ms <= 60_000
    admission.set_rate_class("explain-rc", limit=1, window=60, paused=True)
    paused = admission.explain(waiting)
    assert paused.blocked_by == "rate_class" and paused.detail["paused"] is True
    assert paused.estimated_admission_ms is None


def test_concurrency_limit_with_the_counts():
    q = fresh_queue()
    admission.set_concurrency_limit(q, 1)
    tenant = {enqueue_job(queue=q, partition_key="t") for _ in range(2)}
    (taken,) = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG, queues=[q])
    (waiting,) = tenant - {taken.ref.job_id}  # either may go first: ids of one millisecond
    other = enqueue_job(queue=q, partition_key="u")
    verdict = admission.explain(waiting)
    assert verdict.blocked_by == "concurrency_limit"
    assert verdict.detail == {
        "state": "available",
        "queue": q,
        "partition_key": "t",
        "running": 1,
        "max_concurrent": 1,
        "on_saturated": "queue",
    }
    assert admission.explain(other).admissible


def test_schedule_pending_and_paused_queue():
    later, _ = job_in_state(State.SCHEDULED)
    verdict = admission.explain(later)
    assert verdict.blocked_by == "schedule" and not verdict.admissible
    assert 3_500_000 < verdict.estimated_admission_ms <= 3_600_000
    pending, _ = job_in_state(State.PENDING)
    assert admission.explain(pending).blocked_by == "schedule"
    assert admission.explain(pending).detail["pending"] is True
    q = fresh_queue()
    job_id = enqueue_job(queue=q)
    store.queue_set_paused(q, True)
    assert admission.explain(job_id).blocked_by == "queue_paused"


def test_quarantine():
    job_id, _ = job_in_state(State.QUARANTINED)
    verdict = admission.explain(job_id)
    assert (verdict.admissible, verdict.blocked_by) == (False, "quarantine")


def test_running_and_finished_jobs_are_not_waiting():
    for state in (State.RUNNING, State.COMPLETED):
        job_id, _ = job_in_state(state)
        verdict = admission.explain(job_id)
        assert (verdict.admissible, verdict.blocked_by) == (False, None)
        assert verdict.detail["state"] == state.value


def test_unknown_job():
    with pytest.raises(NotFoundError):
        admission.explain("no-such-job")


def test_declared_policies_are_applied():
    from django.test import override_settings

    from headgate_django.conf import headgate_settings

    declared = {
        "RATE_CLASSES": {"decl-mail": {"limit": 7, "window": 2}},
        "CONCURRENCY_LIMITS": {"decl-q": {"max_concurrent": 2, "on_saturated": "discard"}},
        "BACKPRESSURE": {"decl-q": 9},
    }
    with override_settings(HEADGATE=declared):
        headgate_settings.reload()
        assert admission.apply_declared() == 3
    headgate_settings.reload()
    (rc,) = [c for c in admission.rate_classes() if c["name"] == "decl-mail"]
    assert (rc["limit"], rc["window_ms"], rc["burst"]) == (7, 2000, 7)
    assert {"queue": "decl-q", "max_concurrent": 2, "on_saturated": "discard"} in (
        admission.concurrency_limits()
    )
    assert {"queue": "decl-q", "max_unfinished": 9, "current": 0} in admission.backpressure_limits()


def test_describe_in_words():
    q = fresh_queue()
    admission.set_rate_class("words-rc", limit=1, window=timedelta(seconds=60))
    both = {enqueue_job(queue=q, rate_class="words-rc") for _ in range(2)}
    (taken,) = [job.ref.job_id for job in claim(q)]
    (waiting,) = both - {taken}  # either may go first: ids of one millisecond
    text = admission.describe(admission.explain(waiting))
    assert text.startswith("waiting: rate class words-rc has ") and "next in" in text
    assert admission.describe(admission.explain(enqueue_job())).startswith("admissible")

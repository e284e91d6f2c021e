"""Rate classes: a token bucket per class, spent by the claim on the store clock. A job of
an exhausted or paused class is not claimed (not locked, no attempt charged); an
unconfigured class is fail-open; handlers' reported costs are reconciled at ack."""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta

import pytest

from headgate_django import admission, enqueue, store
from headgate_django.exceptions import DefinitionError
from headgate_django.models import Job, RateBucket
from headgate_django.store.fenced import Completion
from tests.app import tasks
from tests.conformance.helpers import LONG, WORKER, enqueue_job, fresh_queue
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db

_names = iter(range(10**6))


def fresh_class() -> str:
    return f"rc-{next(_names)}"


def claim(queue: str | None = None, limit: int = 50):
    return store.job_claim(
        worker_id=WORKER, limit=limit, lease_ttl=LONG, queues=[queue] if queue else None
    )


def tokens(name: str) -> float:
    return next(c["tokens"] for c in admission.rate_classes() if c["name"] == name)


def test_an_exhausted_class_is_not_claimed_and_nothing_is_charged():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=3, window=timedelta(hours=1))
    jobs = [enqueue_job(queue=q, rate_class=rc) for _ in range(5)]
    assert len(claim(q)) == 3
    assert claim(q) == []
    waiting = Job.objects.filter(pk__in=jobs, state="available")
    assert waiting.count() == 2
    assert {(j.attempt, j.crash_attempt, j.fence, j.lease_id) for j in waiting} == {(0, 0, 0, None)}
    assert tokens(rc) < 1


def test_other_jobs_in_the_queue_are_not_held_back():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=1, window=timedelta(hours=1))
    limited = [enqueue_job(queue=q, rate_class=rc, priority=9) for _ in range(3)]
    plain = [enqueue_job(queue=q) for _ in range(3)]
    claimed = {c.ref.job_id for c in claim(q)}
    # Ids made in one millisecond do not sort by creation: any one limited job may be the one.
    assert set(plain) <= claimed
    assert len(claimed & set(limited)) == 1
    assert len(claimed) == 4


def test_the_worker_serving_every_queue_spends_the_same_bucket():
    rc = fresh_class()
    admission.set_rate_class(rc, limit=2, window=timedelta(hours=1))
    for _ in range(2):
        q = fresh_queue()
        for _ in range(3):
            enqueue_job(queue=q, rate_class=rc)
    claim(limit=100)
    assert Job.objects.filter(rate_class=rc, state="running").count() == 2


def test_tokens_come_back_on_the_store_clock():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=1, window=timedelta(milliseconds=50), burst=1)
    for _ in range(3):
        enqueue_job(queue=q, rate_class=rc)
    assert len(claim(q)) == 1
    wait_for(lambda: claim(q), timeout=10, interval=0.01)
    assert Job.objects.filter(queue=q, state="running").count() == 2


def test_weight_is_the_cost_and_a_heavy_job_waits_for_a_full_bucket():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=10, window=timedelta(hours=1))
    heavy = enqueue_job(queue=q, rate_class=rc, weight=7, priority=2)
    light = enqueue_job(queue=q, rate_class=rc, weight=4, priority=1)
    small = enqueue_job(queue=q, rate_class=rc, weight=3)
    assert [c.ref.job_id for c in claim(q)] == [heavy, small]  # 7 + 3; 4 does not fit
    assert Job.objects.get(pk=light).state == "available"
    q2, rc2 = fresh_queue(), fresh_class()
    admission.set_rate_class(rc2, limit=5, window=timedelta(hours=1))
    huge = enqueue_job(queue=q2, rate_class=rc2, weight=50)
    assert [c.ref.job_id for c in claim(q2)] == [huge]  # a full bucket admits it
    assert tokens(rc2) == pytest.approx(-45, abs=0.01)  # and is left in debt


def test_pause_stops_claims_at_once_and_resume_restarts_them():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=100, window=1)
    for _ in range(4):
        enqueue_job(queue=q, rate_class=rc)
    assert len(claim(q, limit=1)) == 1
    admission.set_rate_class(rc, limit=100, window=1, paused=True)
    assert claim(q) == []
    admission.set_rate_class(rc, limit=100, window=1, paused=False)
    assert len(claim(q)) == 3


def test_an_unconfigured_class_is_fail_open():
    q = fresh_queue()
    for _ in range(3):
        enqueue_job(queue=q, rate_class="nobody-configured-this")
    assert len(claim(q)) == 3


def test_removing_a_class_lets_its_jobs_run_unlimited():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=1, window=timedelta(hours=1))
    for _ in range(3):
        enqueue_job(queue=q, rate_class=rc)
    assert len(claim(q)) == 1 and claim(q) == []
    assert admission.remove_rate_class(rc) is True
    assert admission.remove_rate_class(rc) is False
    assert len(claim(q)) == 2


def test_a_ceiling_and_a_rate_class_together_spend_no_token_on_a_full_partition():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=10, window=timedelta(hours=1))
    admission.set_concurrency_limit(q, 2)
    for _ in range(6):
        enqueue_job(queue=q, rate_class=rc)
    claimed = claim(q)
    assert len(claimed) == 2
    assert claim(q) == []
    assert tokens(rc) == pytest.approx(8, abs=0.01)
    store.job_complete_many([Completion(claimed[0].ref, None)])
    assert len(claim(q)) == 1
    assert tokens(rc) == pytest.approx(7, abs=0.01)


def test_changing_a_class_keeps_its_tokens_capped_at_the_new_burst():
    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=10, window=timedelta(hours=1))
    for _ in range(4):
        enqueue_job(queue=q, rate_class=rc)
    claim(q)
    assert tokens(rc) == pytest.approx(6, abs=0.01)
    admission.set_rate_class(rc, limit=10, window=timedelta(hours=1), burst=3)
    assert tokens(rc) == pytest.approx(3, abs=0.01)


def test_reconcile_gives_back_at_most_the_burst():
    rc = fresh_class()
    admission.set_rate_class(rc, limit=5, window=timedelta(hours=1))
    store.rate_bucket_reconcile({rc: -3})
    assert tokens(rc) == pytest.approx(2, abs=0.01)
    store.rate_bucket_reconcile({rc: 10})
    assert tokens(rc) == pytest.approx(5, abs=0.01)


BAD = {
    "limit-zero": {"limit": 0, "window": 1},
    "limit-negative": {"limit": -5, "window": 1},
    "window-zero": {"limit": 5, "window": 0},
    "window-negative": {"limit": 5, "window": timedelta(seconds=-1)},
    "burst-zero": {"limit": 5, "window": 1, "burst": 0},
    "paused-not-bool": {"limit": 5, "window": 1, "paused": 1},
}


@pytest.mark.parametrize("kwargs", BAD.values(), ids=BAD.keys())
def test_bad_rate_classes_are_refused_and_nothing_is_written(kwargs):
    rc = fresh_class()
    with pytest.raises(DefinitionError):
        admission.set_rate_class(rc, **kwargs)
    assert not RateBucket.objects.filter(pk=rc).exists()


@pytest.mark.parametrize("name", ["", "has space", "r" * 129, 7])
def test_bad_rate_class_names(name):
    with pytest.raises(DefinitionError):
        admission.set_rate_class(name, limit=1, window=1)
    assert not RateBucket.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_reconciles_reported_costs_at_ack_and_warns_once(caplog):
    from headgate_django.worker.runner import Worker

    q, rc = fresh_queue(), fresh_class()
    admission.set_rate_class(rc, limit=100, window=timedelta(hours=1))
    enqueue(
        [
            dataclasses.replace(tasks.charge.envelope(cost=1), queue=q, rate_class=rc, weight=5),
            dataclasses.replace(tasks.charge.envelope(cost=9), queue=q, rate_class=rc, weight=5),
            dataclasses.replace(tasks.charge.envelope(cost=2), queue=q, rate_class="unknown-rc"),
            dataclasses.replace(tasks.charge.envelope(cost=2), queue=q, rate_class="unknown-rc"),
        ]
    )
    with caplog.at_level(logging.WARNING, logger="headgate_django"):
        Worker(queues=[q], concurrency=2, burst=True, run_duties=False).run()
    assert set(Job.objects.filter(queue=q).values_list("state", flat=True)) == {"completed"}
    # Charged 5 + 5 at the claims, reported 1 + 9: the same 10 in the end.
    assert tokens(rc) == pytest.approx(90, abs=0.1)
    warnings = [r for r in caplog.records if "unknown-rc" in r.getMessage()]
    assert len(warnings) == 1 and "not configured" in warnings[0].getMessage()


def test_charge_refuses_a_bad_cost():
    from headgate_django.context import JobContext

    (job,) = claim_one()
    ctx = JobContext(job)
    for bad in (-1, 1.5, "3", None):
        with pytest.raises(DefinitionError):
            ctx.charge(bad)
    ctx.charge(0)
    assert ctx.charged == 0


def claim_one():
    q = fresh_queue()
    enqueue_job(queue=q, rate_class="x", weight=3)
    claimed = claim(q)
    assert (claimed[0].rate_class, claimed[0].weight) == ("x", 3)
    return claimed

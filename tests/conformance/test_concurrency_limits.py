"""Concurrency ceilings per queue and partition, enforced by the claim itself: exact counts,
the four ``on_saturated`` strategies, expired leases holding their slots until reclaimed,
runtime changes on the next claim, and bad input refused with nothing written."""

from __future__ import annotations

import time

import pytest

from headgate_django import admission, store
from headgate_django.exceptions import DefinitionError, LeaseLostError
from headgate_django.models import ConcurrencyLimit, Job, QueueState
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import (
    BLINK,
    LONG,
    WORKER,
    enqueue_job,
    expire_lease,
    fresh_queue,
    state_of,
)

pytestmark = pytest.mark.django_db


def fill(queue: str, n: int, **kwargs) -> list[str]:
    """``n`` jobs in the order a claim takes them (priority, due time, id: ids made in the
    same millisecond do not sort in the order they were made)."""
    ids = [enqueue_job(queue=queue, **kwargs) for _ in range(n)]
    ordered = Job.objects.filter(pk__in=ids).order_by("-priority", "scheduled_at", "id")
    return list(ordered.values_list("id", flat=True))


def claim(queue: str, limit: int = 50, **kwargs):
    kwargs.setdefault("lease_ttl", LONG)
    return store.job_claim(worker_id=WORKER, limit=limit, queues=[queue], **kwargs)


def claim_all(limit: int = 50):
    return store.job_claim(worker_id=WORKER, limit=limit, lease_ttl=LONG)


def running(queue: str, partition: str | None = None) -> int:
    jobs = Job.objects.filter(queue=queue, state="running")
    if partition is not None:
        jobs = jobs.filter(partition_key=partition)
    return jobs.count()


def test_a_ceiling_caps_each_claim_and_frees_slots_as_jobs_finish():
    q = fresh_queue()
    fill(q, 10)
    admission.set_concurrency_limit(q, 3)
    first = claim(q)
    assert len(first) == 3 and running(q) == 3
    assert claim(q) == []
    store.job_complete_many([Completion(first[0].ref, None)])
    again = claim(q)
    assert len(again) == 1 and running(q) == 3


def test_the_ceiling_is_per_partition():
    q = fresh_queue()
    for tenant in ("a", "b", ""):
        fill(q, 5, partition_key=tenant)
    admission.set_concurrency_limit(q, 2)
    claimed = claim(q)
    assert len(claimed) == 6
    assert [running(q, p) for p in ("a", "b", "")] == [2, 2, 2]


def test_a_worker_serving_every_queue_honours_the_ceiling():
    q = fresh_queue()
    fill(q, 6)
    admission.set_concurrency_limit(q, 2)
    claim_all(limit=100)
    assert running(q) == 2


def test_priority_order_holds_within_the_ceiling():
    q = fresh_queue()
    low = fill(q, 3)
    high = fill(q, 2, priority=5)
    admission.set_concurrency_limit(q, 2)
    assert {c.ref.job_id for c in claim(q)} == set(high)
    assert all(state_of(j) == "available" for j in low)


def test_an_expired_lease_keeps_its_slot_until_it_is_reclaimed():
    q = fresh_queue()
    fill(q, 4)
    admission.set_concurrency_limit(q, 2)
    assert len(claim(q, lease_ttl=BLINK)) == 2
    expire_lease()
    assert claim(q) == []  # the dead worker's jobs still hold both slots
    store.job_reclaim_expired()
    assert len(claim(q)) == 2
    assert running(q) == 2


def test_discard_archives_the_incoming_job_attempt_neutral():
    q = fresh_queue()
    jobs = fill(q, 4, partition_key="t")
    admission.set_concurrency_limit(q, 2, on_saturated="discard")
    claimed = claim(q, limit=2)
    assert len(claimed) == 2
    assert claim(q, limit=5) == []
    for job_id in jobs[2:]:
        job = Job.objects.get(pk=job_id)
        assert (job.state, job.attempt, job.crash_attempt, job.lease_id) == (
            "archived",
            0,
            0,
            None,
        )
        assert job.finalized_at is not None and job.expires_at is not None
    assert running(q) == 2


def test_cancel_incoming_cancels_the_incoming_job():
    q = fresh_queue()
    jobs = fill(q, 3)
    admission.set_concurrency_limit(q, 1, on_saturated="cancel_incoming")
    assert [c.ref.job_id for c in claim(q, limit=1)] == jobs[:1]
    assert claim(q) == []
    assert [state_of(j) for j in jobs] == ["running", "cancelled", "cancelled"]
    assert Job.objects.get(pk=jobs[1]).attempt == 0


def test_cancel_running_cancels_the_oldest_and_admits_the_newcomer():
    q = fresh_queue()
    old = fill(q, 2, partition_key="t")
    admission.set_concurrency_limit(q, 2, on_saturated="cancel_running")
    (first,) = claim(q, limit=1)
    time.sleep(0.005)  # the second is claimed later on the store clock
    (second,) = claim(q, limit=1)
    old = [first.ref.job_id, second.ref.job_id]
    newcomer = enqueue_job(queue=q, partition_key="t")
    (admitted,) = claim(q)
    assert admitted.ref.job_id == newcomer
    assert running(q, "t") == 2
    assert state_of(old[0]) == "cancelled"
    assert state_of(old[1]) == "running"
    # The cancelled handler learns at its next fenced write.
    with pytest.raises(LeaseLostError):
        store.job_save_progress(first.ref, {"step": 1})
    assert store.job_renew_leases([first.ref], lease_ttl=LONG) == {old[0]}


def test_cancel_running_never_cancels_a_job_it_just_admitted():
    q = fresh_queue()
    jobs = fill(q, 5)
    admission.set_concurrency_limit(q, 2, on_saturated="cancel_running")
    assert len(claim(q)) == 2  # nothing was running: two admitted, three wait
    assert [state_of(j) for j in jobs] == ["running"] * 2 + ["available"] * 3


def test_other_queues_and_other_strategies_are_unaffected():
    governed, free = fresh_queue(), fresh_queue()
    fill(governed, 5)
    fill(free, 5)
    admission.set_concurrency_limit(governed, 1)
    claim_all(limit=100)
    assert (running(governed), running(free)) == (1, 5)


def test_raising_removing_and_pausing_take_effect_on_the_next_claim():
    q = fresh_queue()
    fill(q, 10)
    admission.set_concurrency_limit(q, 2)
    assert len(claim(q)) == 2
    admission.set_concurrency_limit(q, 4)
    assert len(claim(q)) == 2 and running(q) == 4
    store.queue_set_paused(q, True)
    admission.set_concurrency_limit(q, 8)
    assert claim(q) == []
    store.queue_set_paused(q, False)
    assert len(claim(q)) == 4
    admission.set_concurrency_limit(q, None)
    assert not QueueState.objects.get(pk=q).admission
    assert len(claim(q)) == 2 and running(q) == 10


def test_lowering_below_the_running_count_admits_nothing_until_it_falls():
    q = fresh_queue()
    fill(q, 6)
    admission.set_concurrency_limit(q, 4)
    claimed = claim(q)
    admission.set_concurrency_limit(q, 2)
    assert claim(q) == []
    store.job_complete_many([Completion(c.ref, None) for c in claimed[:2]])
    assert claim(q) == []  # two still running: the new ceiling
    store.job_complete_many([Completion(claimed[2].ref, None)])
    assert len(claim(q)) == 1


def test_the_kinds_filter_still_applies():
    q = fresh_queue()
    fill(q, 2, kind="test.echo")
    admission.set_concurrency_limit(q, 5)
    assert claim(q, kinds=["test.noop"]) == []
    assert len(claim(q, kinds=["test.echo"])) == 2


BAD = {
    "zero": (0, "queue"),
    "negative": (-1, "queue"),
    "float": (2.5, "queue"),
    "bool": (True, "queue"),
    "huge": (2**31, "queue"),
    "unknown-strategy": (3, "drop"),
    "strategy-none": (3, None),
}


@pytest.mark.parametrize(("limit", "strategy"), BAD.values(), ids=BAD.keys())
def test_bad_ceilings_are_refused_and_nothing_is_written(limit, strategy):
    q = fresh_queue()
    with pytest.raises(DefinitionError) as info:
        admission.set_concurrency_limit(q, limit, on_saturated=strategy)
    assert ("on_saturated" if strategy in (None, "drop") else "max_concurrent") in str(info.value)
    assert not ConcurrencyLimit.objects.filter(queue=q).exists()
    assert not QueueState.objects.filter(pk=q).exists()


@pytest.mark.parametrize("queue", ["", "has space", "q" * 129])
def test_bad_queue_names_are_refused(queue):
    with pytest.raises(DefinitionError):
        admission.set_concurrency_limit(queue, 3)
    assert not ConcurrencyLimit.objects.exists()


def test_listing():
    q = fresh_queue()
    admission.set_concurrency_limit(q, 7, on_saturated="discard")
    assert {"queue": q, "max_concurrent": 7, "on_saturated": "discard"} in (
        admission.concurrency_limits()
    )

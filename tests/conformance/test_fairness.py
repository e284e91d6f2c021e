"""Tenant fairness inside a queue: deficit round-robin over ``partition_key``, decided by
the claim itself. A deep backlog cannot hold a newcomer back for more than a bounded
number of claims; an idle tenant's share goes to the others; priority still orders each
tenant's jobs; carried credit is capped; bad input is refused with nothing written."""

from __future__ import annotations

import dataclasses

import pytest

from headgate_django import admission, store
from headgate_django.exceptions import DefinitionError
from headgate_django.models import Fairness, Job, PartitionDeficit, QueueState
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import LONG, WORKER, envelope, fresh_queue

pytestmark = pytest.mark.django_db


def fill(queue: str, tenant: str, n: int, **kwargs) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 500):
        ids += store.job_insert_many(
            [
                envelope(queue=queue, partition_key=tenant, **kwargs)
                for _ in range(min(500, n - start))
            ]
        )
    return ids


def claim(queue: str, limit: int):
    return store.job_claim(worker_id=WORKER, limit=limit, lease_ttl=LONG, queues=[queue])


def tenants(claimed) -> list[str]:
    """The claimed jobs' tenants, sorted: a claim returns its jobs in claim order, and
    jobs enqueued in one millisecond have ids that do not sort by creation."""
    keys = dict(
        Job.objects.filter(pk__in=[c.ref.job_id for c in claimed]).values_list(
            "id", "partition_key"
        )
    )
    return sorted(keys[c.ref.job_id] for c in claimed)


def run_worker(queue: str, concurrency: int, until) -> list[str]:
    """A worker with ``concurrency`` slots: claim what is free, finish it, claim again.
    The tenants of the jobs in the order they started, until ``until(started)``."""
    started: list[str] = []
    while not until(started):
        claimed = claim(queue, concurrency)
        assert claimed, "the queue ran dry before the condition held"
        started += tenants(claimed)
        store.job_complete_many([Completion(c.ref, None) for c in claimed])
    return started


def test_a_deep_backlog_delays_a_new_tenant_by_a_bounded_number_of_claims():
    q = fresh_queue()
    admission.set_fairness(q)
    fill(q, "A", 2000)
    fill(q, "B", 20)
    started = run_worker(q, 4, until=lambda s: s.count("B") == 20)
    assert started.count("A") < 200
    # In fact the two alternate, a quantum (10) each: A's backlog costs B one turn at most.
    assert started.count("A") <= 10 + 20


def test_tenants_take_turns_of_one_quantum():
    q = fresh_queue()
    admission.set_fairness(q, quantum=5, credit_cap=0)
    for tenant in ("a", "b", "c"):
        fill(q, tenant, 20)
    assert tenants(claim(q, 15)) == ["a"] * 5 + ["b"] * 5 + ["c"] * 5
    # A claim that fills up in the middle of a turn leaves the turn there.
    assert tenants(claim(q, 3)) == ["a"] * 3
    assert tenants(claim(q, 4)) == ["a", "a", "b", "b"]


def test_it_is_work_conserving():
    q = fresh_queue()
    admission.set_fairness(q)
    fill(q, "only", 60)
    assert len(claim(q, 50)) == 50  # nobody else waits: the lone tenant takes every slot
    fill(q, "late", 5)
    assert tenants(claim(q, 20)) == ["late"] * 5 + ["only"] * 10


def test_jobs_without_a_tenant_take_their_turns_too():
    """``""`` is a partition like any other, alone in the queue or beside tenants."""
    q = fresh_queue()
    admission.set_fairness(q, quantum=2, credit_cap=0)
    fill(q, "", 3)
    assert tenants(claim(q, 10)) == [""] * 3
    fill(q, "", 3)
    fill(q, "b", 3)
    assert tenants(claim(q, 4)) == ["", "", "b", "b"]


def test_priority_orders_jobs_within_a_tenant():
    q = fresh_queue()
    admission.set_fairness(q, quantum=2)
    fill(q, "a", 3)
    urgent = fill(q, "a", 2, priority=9)
    fill(q, "b", 3)
    claimed = claim(q, 2)
    assert {c.ref.job_id for c in claimed} == set(urgent)


def test_a_job_costs_its_weight():
    q = fresh_queue()
    admission.set_fairness(q, quantum=10, credit_cap=0)
    fill(q, "heavy", 10, weight=5)
    fill(q, "light", 10)
    assert tenants(claim(q, 12)) == ["heavy"] * 2 + ["light"] * 10


def test_a_tenant_held_by_its_ceiling_carries_capped_credit():
    q = fresh_queue()
    admission.set_fairness(q, quantum=10, credit_cap=4)
    admission.set_concurrency_limit(q, 2)
    fill(q, "a", 20)
    fill(q, "b", 20)
    claimed = claim(q, 10)
    assert sorted(tenants(claimed)) == ["a", "a", "b", "b"]
    carried = dict(PartitionDeficit.objects.filter(queue=q).values_list("partition_key", "deficit"))
    assert carried == {"a": 4, "b": 4}  # 8 unspent each, capped at 4


def test_idle_tenants_bank_nothing():
    q = fresh_queue()
    admission.set_fairness(q, quantum=3, credit_cap=10)
    fill(q, "a", 2)
    fill(q, "b", 10)
    assert tenants(claim(q, 5)) == ["a", "a", "b", "b", "b"]
    assert not PartitionDeficit.objects.filter(queue=q, partition_key="a").exists()


def test_explain_names_the_tenant_with_the_turn():
    q = fresh_queue()
    admission.set_fairness(q, quantum=5)
    fill(q, "a", 20)
    (waiting,) = fill(q, "b", 1)
    fill(q, "c", 3)
    claim(q, 2)  # "a" is in the middle of its turn
    verdict = admission.explain(waiting)
    assert (verdict.admissible, verdict.blocked_by) == (False, "fairness")
    assert verdict.detail["turn"] == "a" and verdict.detail["partition_key"] == "b"
    assert verdict.detail["partitions_ahead"] == 1 and verdict.detail["quantum"] == 5
    assert "partition a has the turn" in admission.describe(verdict)
    claim(q, 3)  # a's turn is over: b's is next
    assert admission.explain(waiting).admissible


def test_removing_fairness_restores_plain_order():
    q = fresh_queue()
    admission.set_fairness(q, quantum=1)
    fill(q, "a", 5)
    fill(q, "b", 5)
    assert tenants(claim(q, 2)) == ["a", "b"]
    assert admission.remove_fairness(q) is True
    assert not QueueState.objects.get(name=q).admission
    assert len(claim(q, 8)) == 8
    assert admission.remove_fairness(q) is False


def test_fairness_works_with_a_worker_serving_every_queue():
    q = fresh_queue()
    admission.set_fairness(q, quantum=2, credit_cap=0)
    fill(q, "a", 5)
    fill(q, "b", 5)
    claimed = store.job_claim(worker_id=WORKER, limit=4, lease_ttl=LONG)
    assert tenants([c for c in claimed if c.queue == q]) == ["a", "a", "b", "b"]


def test_the_policy_reads_back():
    q = fresh_queue()
    admission.set_fairness(q, quantum=7, credit_cap=3)
    (row,) = [f for f in admission.fair_queues() if f["queue"] == q]
    assert row == {"queue": q, "quantum": 7, "credit_cap": 3, "turn": None, "credit": 0}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quantum": 0},
        {"quantum": -1},
        {"quantum": 1.5},
        {"quantum": True},
        {"quantum": 10**9},
        {"credit_cap": -1},
        {"credit_cap": "4"},
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(kwargs):
    q = fresh_queue()
    with pytest.raises(DefinitionError):
        admission.set_fairness(q, **kwargs)
    assert not Fairness.objects.filter(queue=q).exists()
    assert not QueueState.objects.filter(name=q).exists()


@pytest.mark.parametrize("queue", ["", "has space", "x" * 200, "new\nline"])
def test_a_bad_queue_name_is_refused(queue):
    with pytest.raises(DefinitionError):
        admission.set_fairness(queue)
    assert not Fairness.objects.exists() or not Fairness.objects.filter(queue=queue).exists()


def test_an_oversize_partition_key_is_refused_and_nothing_is_written():
    q = fresh_queue()
    admission.set_fairness(q)
    good = envelope(queue=q, partition_key="ok")
    bad = dataclasses.replace(good, partition_key="x" * 129)
    with pytest.raises(DefinitionError, match="longer than 128 bytes"):
        store.job_insert_many([good, bad])
    assert not Job.objects.filter(queue=q).exists()


@pytest.mark.parametrize(
    "entry", [0, "yes", {"quantum": 0}, {"credit_cap": -1}, {"quantum": 5, "colour": "red"}]
)
def test_declared_fairness_is_checked(entry):
    from django.test import override_settings

    from headgate_django.checks import check_settings

    with override_settings(HEADGATE={"FAIRNESS": {"decl-fair": entry}}):
        errors = [e for e in check_settings() if e.id == "headgate.E009"]
    assert errors and "FAIRNESS" in errors[0].msg and "decl-fair" in errors[0].msg


def test_declared_fairness_is_applied():
    from django.test import override_settings

    with override_settings(
        HEADGATE={"FAIRNESS": {"decl-fair": True, "decl-fair-2": {"quantum": 3}}}
    ):
        assert admission.apply_declared() == 2
    rows = {f["queue"]: f for f in admission.fair_queues()}
    assert (rows["decl-fair"]["quantum"], rows["decl-fair"]["credit_cap"]) == (10, 40)
    assert (rows["decl-fair-2"]["quantum"], rows["decl-fair-2"]["credit_cap"]) == (3, 40)

"""Queue weights: a worker serving several queues claims them in the ratio of their
weights while both have work (a persisted ledger), gives what one cannot use to the others,
keeps priority inside each queue, and refuses bad input with nothing written."""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.management import call_command
from django.test import override_settings

from headgate_django import admission, store
from headgate_django.checks import check_settings
from headgate_django.exceptions import DefinitionError
from headgate_django.models import QueueState
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import LONG, WORKER, envelope, fresh_queue

pytestmark = pytest.mark.django_db


def fill(queue: str, n: int, **kwargs) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 500):
        batch = [envelope(queue=queue, **kwargs) for _ in range(min(500, n - start))]
        ids += store.job_insert_many(batch)
    return ids


def drain(queues, claims: int, limit: int) -> Counter:
    """``claims`` jobs claimed ``limit`` at a time (each batch finished before the next),
    counted by queue."""
    counts: Counter = Counter()
    while sum(counts.values()) < claims:
        want = min(limit, claims - sum(counts.values()))
        got = store.job_claim(worker_id=WORKER, limit=want, lease_ttl=LONG, queues=queues)
        assert got, "ran dry"
        counts.update(c.queue for c in got)
        store.job_complete_many([Completion(c.ref, None) for c in got])
    return counts


@pytest.mark.parametrize("limit", [1, 4, 10])
def test_two_backlogged_queues_split_by_weight(limit):
    a, b = fresh_queue(), fresh_queue()
    fill(a, 450)
    fill(b, 450)
    admission.set_queue_weight(a, 3)
    admission.set_queue_weight(b, 1)
    counts = drain([a, b], 400, limit)
    assert 300 * 0.9 <= counts[a] <= 300 * 1.1
    assert 100 * 0.9 <= counts[b] <= 100 * 1.1


def test_a_worker_serving_every_queue_splits_by_weight_too():
    a, b = fresh_queue(), fresh_queue()
    fill(a, 250)
    fill(b, 250)
    admission.set_queue_weight(a, 1)
    admission.set_queue_weight(b, 4)
    counts = drain(None, 200, 5)
    assert 40 * 0.9 <= counts[a] <= 40 * 1.1 and 160 * 0.9 <= counts[b] <= 160 * 1.1


def test_what_a_dry_queue_cannot_use_goes_to_the_other():
    a, b = fresh_queue(), fresh_queue()
    fill(a, 3)
    fill(b, 50)
    admission.set_queue_weight(a, 3)
    admission.set_queue_weight(b, 1)
    counts = drain([a, b], 20, 10)
    assert counts == Counter({a: 3, b: 17})
    # The dry queue is brought level: it is not owed a burst when work returns.
    fill(a, 50)
    counts = drain([a, b], 40, 4)
    assert 30 * 0.8 <= counts[a] <= 30 * 1.2


def test_priority_orders_only_within_a_queue():
    a, b = fresh_queue(), fresh_queue()
    fill(a, 10)
    fill(b, 10)
    urgent = fill(b, 2, priority=100)
    admission.set_queue_weight(a, 1)
    admission.set_queue_weight(b, 1)
    first = store.job_claim(worker_id=WORKER, limit=2, lease_ttl=LONG, queues=[a, b])
    assert {c.queue for c in first} == {a}  # b's priority does not jump a's turn
    second = store.job_claim(worker_id=WORKER, limit=2, lease_ttl=LONG, queues=[a, b])
    assert {c.ref.job_id for c in second} == set(urgent)  # but orders b's own jobs


def test_weights_read_back_and_a_change_keeps_the_place():
    a, b = fresh_queue(), fresh_queue()
    fill(a, 40)
    fill(b, 40)
    admission.set_queue_weight(a, 3)
    admission.set_queue_weight(b, 1)
    drain([a, b], 20, 4)
    rows = {w["queue"]: w for w in admission.queue_weights()}
    # Claims of 4 from the lowest position: a, b, a, a, then a (ties by name).
    assert (rows[a]["weight"], rows[a]["dispatched"], rows[a]["available"]) == (3, 16, 24)
    assert (rows[b]["dispatched"], rows[b]["available"]) == (4, 36)
    admission.set_queue_weight(a, 1)
    assert QueueState.objects.get(name=a).dispatched == 5  # 16 at weight 3 ≈ 5 at weight 1
    assert admission.remove_queue_weight(a) is True
    assert admission.remove_queue_weight(a) is False
    assert a not in {w["queue"] for w in admission.queue_weights()}


def test_removing_every_weight_returns_the_queues_to_the_plain_claim():
    a = fresh_queue()
    admission.set_queue_weight(a, 2)
    assert QueueState.objects.get(name=a).admission is True
    admission.remove_queue_weight(a)
    assert QueueState.objects.get(name=a).admission is False


@pytest.mark.parametrize("weight", [0, -1, 1.5, True, None, "3", 2**31])
def test_bad_weights_are_refused_and_nothing_is_written(weight):
    q = fresh_queue()
    with pytest.raises(DefinitionError, match="weight"):
        admission.set_queue_weight(q, weight)
    assert not QueueState.objects.filter(name=q).exists()


@pytest.mark.parametrize("queue", ["", "has space", "x" * 200, "tab\tq", 7])
def test_invalid_queue_names_are_refused_and_nothing_is_written(queue):
    with pytest.raises(DefinitionError, match="queue"):
        admission.set_queue_weight(queue, 2)
    assert not QueueState.objects.filter(weight__isnull=False).exists()


def test_declared_weights_are_checked_and_applied():
    with override_settings(HEADGATE={"QUEUE_WEIGHTS": {"decl-w": 0}}):
        errors = [e for e in check_settings() if e.id == "headgate.E010"]
        assert errors and "decl-w" in errors[0].msg
    with override_settings(HEADGATE={"QUEUE_WEIGHTS": {"bad name": 2}}):
        assert [e.id for e in check_settings() if e.id == "headgate.E010"] == ["headgate.E010"]
    with override_settings(HEADGATE={"QUEUE_WEIGHTS": [("decl-w", 2)]}):
        assert [e.id for e in check_settings() if e.id == "headgate.E010"] == ["headgate.E010"]
    with override_settings(HEADGATE={"QUEUE_WEIGHTS": {"decl-w": 5}}):
        assert not [e for e in check_settings() if e.id == "headgate.E010"]
        assert admission.apply_declared() == 1
    assert {"queue": "decl-w", "weight": 5, "dispatched": 0, "available": 0} in (
        admission.queue_weights()
    )
    call_command("check")  # the project's own settings stay valid

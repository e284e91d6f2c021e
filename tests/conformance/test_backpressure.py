"""Producer backpressure: an enqueue that would take a queue past ``max_unfinished`` is
refused with :class:`BackpressureError` and writes nothing; batches are all-or-nothing;
the count is exact under concurrent producers."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction

from headgate_django import BackpressureError, admission, enqueue, store
from headgate_django.exceptions import DefinitionError
from headgate_django.models import Backpressure, Job
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import LONG, WORKER, envelope, fresh_queue

pytestmark = pytest.mark.django_db


def unfinished(queue: str) -> int:
    return Job.objects.filter(
        queue=queue, state__in=["pending", "scheduled", "available", "running", "retryable"]
    ).count()


def test_the_sixth_enqueue_is_refused_and_writes_nothing():
    q = fresh_queue()
    admission.set_backpressure(q, 5)
    for _ in range(5):
        enqueue(envelope(queue=q))
    with pytest.raises(BackpressureError) as info:
        enqueue(envelope(queue=q))
    err = info.value
    assert (err.queue, err.limit, err.current, err.incoming) == (q, 5, 5, 1)
    assert err.details == {"queue": q, "limit": 5, "current": 5, "incoming": 1}
    assert err.status_code == 429
    assert Job.objects.filter(queue=q).count() == 5


def test_a_batch_that_would_pass_the_limit_fails_whole():
    q, other = fresh_queue(), fresh_queue()
    admission.set_backpressure(q, 5)
    enqueue([envelope(queue=q) for _ in range(4)])
    with pytest.raises(BackpressureError) as info:
        enqueue([envelope(queue=other), *(envelope(queue=q) for _ in range(3))])
    assert (info.value.current, info.value.incoming) == (4, 3)
    assert Job.objects.filter(queue__in=[q, other]).count() == 4
    enqueue([envelope(queue=other), envelope(queue=q)])  # exactly to the limit
    assert unfinished(q) == 5


def test_every_unfinished_state_counts_and_finished_ones_do_not():
    q = fresh_queue()
    admission.set_backpressure(q, 4)
    enqueue(envelope(queue=q, pending=True))
    enqueue(envelope(queue=q, delay=timedelta(hours=1)))
    enqueue([envelope(queue=q), envelope(queue=q)])
    (claimed,) = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG, queues=[q])
    store.job_retry(claimed.ref, error="boom", delay=timedelta(hours=1))  # retryable
    with pytest.raises(BackpressureError):
        enqueue(envelope(queue=q))
    (claimed,) = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG, queues=[q])
    store.job_complete_many([Completion(claimed.ref, None)])
    enqueue(envelope(queue=q))  # the completed job freed its place
    pending = Job.objects.get(queue=q, state="pending")
    store.job_cancel(pending.pk)
    enqueue(envelope(queue=q))
    assert unfinished(q) == 4


def test_zero_closes_intake_and_none_removes_the_limit():
    q = fresh_queue()
    admission.set_backpressure(q, 0)
    with pytest.raises(BackpressureError) as info:
        enqueue(envelope(queue=q))
    assert (info.value.limit, info.value.current) == (0, 0)
    admission.set_backpressure(q, None)
    assert not Backpressure.objects.filter(queue=q).exists()
    enqueue([envelope(queue=q) for _ in range(3)])


def test_inside_the_callers_transaction():
    q = fresh_queue()
    admission.set_backpressure(q, 2)
    with transaction.atomic():
        enqueue(envelope(queue=q))
        enqueue(envelope(queue=q))
        with pytest.raises(BackpressureError):
            enqueue(envelope(queue=q))
    assert unfinished(q) == 2


def test_other_queues_are_not_limited():
    q, free = fresh_queue(), fresh_queue()
    admission.set_backpressure(q, 1)
    enqueue(envelope(queue=q))
    enqueue([envelope(queue=free) for _ in range(10)])
    assert unfinished(free) == 10


def test_listing_shows_the_current_count():
    q = fresh_queue()
    admission.set_backpressure(q, 3)
    enqueue([envelope(queue=q), envelope(queue=q)])
    assert {"queue": q, "max_unfinished": 3, "current": 2} in admission.backpressure_limits()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "5", 2**31])
def test_bad_limits_are_refused_and_nothing_is_written(bad):
    q = fresh_queue()
    with pytest.raises(DefinitionError) as info:
        admission.set_backpressure(q, bad)
    assert "max_unfinished" in str(info.value)
    assert not Backpressure.objects.filter(queue=q).exists()


@pytest.mark.django_db(transaction=True)
def test_eight_racing_producers_never_pass_the_limit():
    q = fresh_queue()
    admission.set_backpressure(q, 5)
    accepted: list[int] = []
    refused: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def produce(n: int) -> None:
        try:
            start.wait()
            for i in range(6):
                size = 1 if (n + i) % 2 else 2  # single jobs and pairs
                batch = [envelope(queue=q) for _ in range(size)]
                try:
                    enqueue(batch)
                    accepted.append(len(batch))
                except BackpressureError:
                    refused.append(len(batch))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert unfinished(q) == sum(accepted) <= 5
    assert sum(accepted) >= 4  # the limit was reached, give or take a refused pair
    assert refused

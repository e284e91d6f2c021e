"""Batch handlers: ``@task(batch_size=…, batch_window=…)`` gets up to ``batch_size`` jobs of
its kind in one call; each member keeps its own fence and outcome, so one member's error
or lost lease changes nothing for the others."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.db.models import F

from headgate_django import Skip, store, task, testing
from headgate_django.envelope import Envelope
from headgate_django.exceptions import DefinitionError
from headgate_django.models import Job
from headgate_django.worker.batches import BatchMember
from headgate_django.worker.runner import Worker
from tests.conformance.helpers import fresh_queue, state_of

pytestmark = pytest.mark.django_db(transaction=True)
CALLS: list[list[int]] = []


@task(kind="test.batch.double", batch_size=3, batch_window=timedelta(milliseconds=50))
def double(members: list[BatchMember]):
    CALLS.append([m.kwargs["n"] for m in members])
    results = {}
    for m in members:
        n = m.kwargs["n"]
        m.ctx.log.info("member", n=n)
        if m.kwargs.get("steal"):
            # Another claim takes this member's job while the batch runs.
            Job.objects.filter(pk=m.job_id).update(lease_id="thief", fence=F("fence") + 1)
        if n < 0:
            results[m.job_id] = RuntimeError(f"negative {n}")
        elif n == 0:
            results[m.job_id] = Skip("zero")
        else:
            results[m.job_id] = {"double": n * 2}
    return results


@task(kind="test.batch.explode", batch_size=10, max_attempts=3)
def explode(members):
    raise ValueError(f"all {len(members)} fail")


@task(kind="test.batch.wrong", batch_size=10)
def wrong(members):
    return [1, 2]


def enqueue_in(q: str, definition, *kwargs_list) -> list[str]:
    return store.job_insert_many(
        [replace(definition.envelope(**kw), queue=q) for kw in kwargs_list]
    )


def run_worker(q: str) -> None:
    Worker(queues=[q], concurrency=4, burst=True, run_duties=False).run()


def test_members_are_handed_over_together_and_each_gets_its_result():
    CALLS.clear()
    q = fresh_queue()
    ids = enqueue_in(q, double, *({"n": n} for n in range(1, 6)))
    run_worker(q)
    assert sorted(n for call in CALLS for n in call) == [1, 2, 3, 4, 5]
    assert max(len(call) for call in CALLS) <= 3 and len(CALLS) < 5
    for n, job_id in enumerate(ids, start=1):
        job = Job.objects.get(pk=job_id)
        assert (job.state, job.result) == ("completed", {"double": n * 2})
        assert [a["outcome"] for a in job.logs] == ["success"]


def test_a_members_error_and_skip_are_its_own():
    q = fresh_queue()
    good, bad, skipped = enqueue_in(q, double, {"n": 4}, {"n": -1}, {"n": 0})
    run_worker(q)
    assert state_of(good) == "completed"
    failed = Job.objects.get(pk=bad)
    assert failed.state == "retryable" and failed.attempt == 1
    assert failed.errors[-1]["error"] == "RuntimeError: negative -1"
    assert state_of(skipped) == "archived"


def test_one_members_stolen_lease_leaves_the_others_outcomes_alone():
    q = fresh_queue()
    first, stolen, last = enqueue_in(q, double, {"n": 1}, {"n": 2, "steal": True}, {"n": 3})
    run_worker(q)
    assert [state_of(first), state_of(last)] == ["completed", "completed"]
    assert Job.objects.get(pk=last).result == {"double": 6}
    thief = Job.objects.get(pk=stolen)
    assert (thief.state, thief.lease_id, thief.result, thief.logs) == (
        "running",
        "thief",
        None,
        None,
    )


def test_raising_fails_every_member():
    q = fresh_queue()
    ids = enqueue_in(q, explode, {}, {})
    run_worker(q)
    for job_id in ids:
        job = Job.objects.get(pk=job_id)
        assert job.state == "retryable" and job.errors[-1]["error"].startswith("ValueError: all")


def test_a_return_that_is_not_a_mapping_of_member_ids_fails_them():
    q = fresh_queue()
    (job_id,) = enqueue_in(q, wrong, {})
    run_worker(q)
    assert "returns None or a mapping" in Job.objects.get(pk=job_id).errors[-1]["error"]


def test_an_undecodable_member_is_left_out_of_the_call():
    CALLS.clear()
    q = fresh_queue()
    good = enqueue_in(q, double, {"n": 7})[0]
    bad = store.job_insert_many([Envelope(kind=double.kind, queue=q, payload=b"\xff")])[0]
    run_worker(q)
    assert CALLS == [[7]]
    assert (state_of(good), state_of(bad)) == ("completed", "undecodable")


def test_run_one_runs_a_batch_of_one():
    CALLS.clear()
    job_id = double.enqueue(n=5)
    assert testing.run_one() == (job_id, "completed")
    assert CALLS == [[5]] and Job.objects.get(pk=job_id).result == {"double": 10}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 1001}, "batch_size"),
        ({"batch_size": "3"}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": 3, "batch_window": timedelta(seconds=-1)}, "batch_window"),
        ({"batch_size": 3, "batch_window": 0.05}, "batch_window"),
        ({"batch_window": timedelta(seconds=1)}, "batch_size"),
    ],
)
def test_bad_batch_options_fail_at_decoration(options, message):
    with pytest.raises(DefinitionError, match=message):
        task(kind="test.batch.bad", **options)(lambda members: None)


def test_an_async_batch_handler_is_refused():
    async def handler(members):
        return None

    with pytest.raises(DefinitionError, match="plain function"):
        task(kind="test.batch.async", batch_size=2)(handler)

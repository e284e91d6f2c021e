"""At-most-once effects: ``ctx.once`` commits the function's writes with its record under
the attempt's lease; a retry gets the recorded result without running it, a stale attempt
runs nothing, a failing function records nothing."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from headgate_django import store, task, testing
from headgate_django.context import JobContext
from headgate_django.exceptions import DefinitionError, LeaseLostError
from headgate_django.models import Effect, Job
from headgate_django.signals import job_finished
from headgate_django.store.effect_records import effect_sweep
from headgate_django.store.effects import job_effects
from tests.app.models import Execution
from tests.conformance.helpers import claim, crash, enqueue_job

pytestmark = pytest.mark.django_db


def _effect(ctx: JobContext, label: str):
    def fn() -> int:
        return Execution.objects.create(job_id=ctx.job_id, label=label, attempt=0, fence=0).pk

    return fn


def test_a_retry_gets_the_recorded_result_without_running_it_again():
    job_id = enqueue_job()
    first = JobContext(claim(job_id))
    pk = first.once("charge", _effect(first, "charge"))
    store.job_retry(first.lease, error="failed after the effect")
    store.job_promote(job_id)
    second = JobContext(claim(job_id))
    assert second.once("charge", _effect(second, "charge")) == pk
    assert Execution.objects.filter(job_id=job_id, label="charge").count() == 1
    [record] = job_effects(job_id)
    assert (record.name, record.result, record.fence) == ("charge", pk, first.lease.fence)


def test_a_stale_attempt_runs_nothing():
    job_id = enqueue_job()
    stale, _ = crash(job_id)  # its lease lapsed and was reclaimed
    ctx = JobContext(stale)
    with pytest.raises(LeaseLostError):
        ctx.once("charge", _effect(ctx, "charge"))
    assert ctx.cancelled
    assert not Execution.objects.filter(job_id=job_id).exists()
    assert not Effect.objects.exists()


def test_a_failing_function_records_nothing_and_keeps_none_of_its_writes():
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))

    def half_done() -> None:
        _effect(ctx, "half")()
        raise RuntimeError("gateway timeout")

    with pytest.raises(RuntimeError):
        ctx.once("charge", half_done)
    assert not Execution.objects.filter(job_id=job_id).exists()
    assert not Effect.objects.exists()
    assert ctx.once("charge", lambda: "second try") == "second try"


def test_effects_are_per_name_and_per_job():
    a, b = enqueue_job(), enqueue_job()
    ctx_a, ctx_b = JobContext(claim(a)), JobContext(claim(b))
    assert ctx_a.once("x", lambda: 1) == 1
    assert ctx_a.once("y", lambda: 2) == 2
    assert ctx_b.once("x", lambda: 3) == 3
    assert ctx_a.once("x", lambda: 99) == 1
    assert [r.name for r in job_effects(a)] == ["x", "y"]


@pytest.mark.django_db(transaction=True)  # the write runs on Django's sync thread
def test_aonce_for_async_handlers():
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    assert asyncio.run(ctx.aonce("a", lambda: {"ok": True})) == {"ok": True}
    assert asyncio.run(ctx.aonce("a", lambda: {"ok": False})) == {"ok": True}
    asyncio.run(sync_to_async(connections.close_all)())  # the sync thread's own session


@pytest.mark.parametrize(
    ("name", "fn", "error"),
    [
        ("", lambda: 1, DefinitionError),
        ("n" * 256, lambda: 1, DefinitionError),
        ("not-json", lambda: object(), TypeError),
    ],
    ids=["empty-name", "long-name", "not-json"],
)
def test_bad_input_records_nothing(name, fn, error):
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    with pytest.raises(error):
        ctx.once(name, fn)
    assert not Effect.objects.exists()


def test_records_of_jobs_deleted_outside_the_store_are_swept():
    """A project's own ``DELETE`` (or a worker of an older version) leaves records behind:
    the sweep finds them, one slice of the table a run, and starts over past the end."""
    job_id, kept = enqueue_job(), enqueue_job()
    JobContext(claim(job_id)).once("x", lambda: 1)
    JobContext(claim(kept)).once("x", lambda: 1)
    assert effect_sweep(after=0) == (0, 0)
    Job.objects.filter(pk=job_id).delete()
    first, second = Effect.objects.order_by("id").values_list("id", flat=True)
    assert effect_sweep(after=0, limit=1) == (1, first)
    assert effect_sweep(after=first, limit=1) == (0, second)
    assert effect_sweep(after=second, limit=1) == (0, second)  # none after it: from the start
    assert effect_sweep(after=0, limit=2) == (0, 0)  # a short slice: the end, start over
    assert job_effects(job_id) is None
    assert [r.name for r in job_effects(kept)] == ["x"]


@task(kind="test.once.last")
def pay_last(ctx, amount: int) -> str:
    ctx.once(
        "pay",
        lambda: (
            Execution.objects.create(job_id=ctx.job_id, label="paid", attempt=amount, fence=0).pk
        ),
        last=True,
    )
    return "not recorded: the effect's commit completed the job"


def test_last_effect_commits_with_the_completion():
    job_id = pay_last.enqueue(amount=5)
    assert testing.run_one() == (job_id, "completed")
    job = Job.objects.get(pk=job_id)
    paid = Execution.objects.get(job_id=job_id, label="paid")
    assert (job.state, job.result) == ("completed", paid.pk)
    assert job_effects(job_id)[0].result == paid.pk


def test_a_last_effect_that_fails_leaves_the_job_running():
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))

    def fails() -> None:
        raise RuntimeError("declined")

    with pytest.raises(RuntimeError):
        ctx.once("pay", fails, last=True)
    assert Job.objects.get(pk=job_id).state == "running"
    assert ctx.completed is None and not Effect.objects.exists()


def test_a_last_effect_sends_job_finished_with_its_result():
    heard: list[dict] = []

    def hear(sender, **kwargs) -> None:
        heard.append(kwargs)

    job_finished.connect(hear, sender=pay_last, weak=False)
    try:
        job_id = pay_last.enqueue(amount=1)
        testing.run_one()
    finally:
        job_finished.disconnect(hear, sender=pay_last)
    [kwargs] = heard
    assert kwargs["job_id"] == job_id
    assert kwargs["result"] == Execution.objects.get(job_id=job_id, label="paid").pk


def test_effect_names_that_differ_only_by_case_are_two_effects():
    """Names made from case-sensitive ids (``refund:aB3``, ``refund:Ab3``) are two effects
    on every database: under MySQL/MariaDB's usual case-insensitive collation the second
    used to find the first's record and return its result without ever running."""
    ctx = JobContext(claim(enqueue_job()))
    assert ctx.once("refund:aB3", lambda: "first") == "first"
    assert ctx.once("refund:Ab3", lambda: "second") == "second"
    assert ctx.once("refund:aB3", lambda: "again") == "first"
    assert sorted(r.name for r in job_effects(ctx.job_id)) == ["refund:Ab3", "refund:aB3"]


def test_jobs_whose_ids_differ_only_by_case_or_trailing_spaces_have_their_own_effects():
    """Effect records are keyed by job id and name, compared byte by byte on every
    database: under MySQL/MariaDB's usual collations the second job's ``once`` found the
    first job's record and returned its result without running, and a name with a
    trailing space was the name without it."""
    ctxs = [JobContext(claim(enqueue_job(id=job_id))) for job_id in ("Pay-1", "pay-1", "pay-1 ")]
    for n, ctx in enumerate(ctxs):
        assert ctx.once("charge", lambda n=n: n) == n
    first = ctxs[0]
    assert first.once("charge ", lambda: "padded") == "padded"
    assert first.once("charge", lambda: "again") == 0
    assert [[r.result for r in job_effects(c.job_id)] for c in ctxs] == [[0, "padded"], [1], [2]]

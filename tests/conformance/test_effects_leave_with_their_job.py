"""A job's at-most-once effect records go in the transaction that deletes the job, on every
path that deletes jobs: eviction, delete at ack, revoke, an operator's delete (one job or
in bulk), the doomed descendants of a failed workflow node, the jobs of a vacuumed durable
execution. Left behind, they were found only by the ``effects-prune`` duty, which read
every kept record each minute to find none; and a job enqueued again under the same id
would have found the gone job's records and skipped its effects."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from headgate_django import durable, enqueue, store, testing
from headgate_django.context import JobContext
from headgate_django.models import Effect, Execution, Job
from headgate_django.store.bulk import job_bulk_apply
from headgate_django.store.durable import execution_vacuum
from headgate_django.store.fenced import Completion
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.conformance.helpers import claim, enqueue_job
from tests.durable.helpers import drive, start

pytestmark = pytest.mark.django_db


def _record(job_id: str, name: str = "charge") -> None:
    Effect.objects.create(job_id=job_id, name=name, fence=1, created_at=timezone.now())


def _bystander() -> str:
    """A kept job with a record of its own: no path may touch it."""
    job_id = enqueue_job()
    _record(job_id, "kept")
    return job_id


def _records_of(*job_ids: str) -> list[str]:
    return sorted(Effect.objects.filter(job_id__in=job_ids).values_list("job_id", flat=True))


def test_delete_at_ack() -> None:
    kept = _bystander()
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    ctx.once("charge", lambda: 1)
    assert store.job_complete_many([Completion(ctx.lease, delete=True)]) == {job_id}
    assert _records_of(job_id, kept) == [kept]


def test_eviction() -> None:
    kept = _bystander()
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    ctx.once("charge", lambda: 1)
    store.job_complete_many([Completion(ctx.lease)])
    Job.objects.filter(pk=job_id).update(expires_at=store.db_now() - timedelta(seconds=1))
    assert store.job_evict_retained(limit=10) == {"completed": 1}
    assert _records_of(job_id, kept) == [kept]


def test_revoke() -> None:
    kept = _bystander()
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    ctx.once("charge", lambda: 1)
    store.job_revoke(ctx.lease, reason="withdrawn")
    assert _records_of(job_id, kept) == [kept]


def test_operator_delete() -> None:
    kept = _bystander()
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    ctx.once("charge", lambda: 1)
    store.job_retry(ctx.lease, error="failed after the effect")
    store.job_delete(job_id)
    assert _records_of(job_id, kept) == [kept]


def test_bulk_delete() -> None:
    kept = _bystander()
    doomed = [enqueue_job() for _ in range(3)]
    for job_id in doomed:
        _record(job_id)
    with transaction.atomic():
        assert job_bulk_apply("delete", doomed) == 3
    assert _records_of(*doomed, kept) == [kept]


def test_the_doomed_descendants_of_a_failed_node() -> None:
    kept = _bystander()
    enqueue(
        Workflow("fx-doomed")
        .add("bad", replace(tasks.always_fail.envelope(), max_attempts=1), [])
        .add("child", tasks.echo.envelope(value=1), ["bad"])
        .prepare()
    )
    child = "fx-doomed:child"
    _record(child)
    testing.run_jobs(include_scheduled=True)
    assert not Job.objects.filter(pk=child).exists()
    assert _records_of(child, kept) == [kept]


@durable.operation("fx-vacuum-op", version="1")
def _op(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("fx-vacuum", version="1")
def _workflow(ctx: durable.Context, value: Any) -> Any:
    return ctx.execute_operation("fx-vacuum-op", "1", value).result()


def test_the_jobs_of_a_vacuumed_durable_execution() -> None:
    kept = _bystander()
    execution_id = start("fx-vacuum", 1)
    drive()
    jobs = list(
        Job.objects.filter(workflow_id=f"durable:{execution_id}").values_list("pk", flat=True)
    )
    assert jobs
    for job_id in jobs:
        _record(job_id)
    Execution.objects.filter(pk=execution_id).update(finished_at=store.db_now() - timedelta(days=1))
    assert execution_vacuum(older_than=timedelta(hours=1), limit=100) == [execution_id]
    assert _records_of(*jobs, kept) == [kept]

"""Shared helpers of the workflow tests: build, run and look at workflows."""

from __future__ import annotations

from collections import Counter
from typing import Any

from headgate_django import testing
from headgate_django.models import Job, WorkflowCheckpoint
from headgate_django.store.workflows import coordinator_job_id
from headgate_django.workflows import inspect_workflow, workflow_events
from tests.app.models import Execution


def run(**kwargs: Any) -> testing.RunReport:
    """Run everything that can run, treating scheduled and snoozed jobs as due."""
    return testing.run_jobs(include_scheduled=True, **kwargs)


def node_states(workflow_id: str) -> dict[str, str]:
    return {n.name: n.state for n in inspect_workflow(workflow_id).nodes}


def coordinator(workflow_id: str) -> Job:
    return Job.objects.get(pk=coordinator_job_id(workflow_id))


def checkpoint(workflow_id: str) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.objects.get(pk=workflow_id)


def event_names(workflow_id: str) -> list[str]:
    return [e["event"] for e in workflow_events(workflow_id)]


def runs(job_id: str) -> list[Execution]:
    return list(Execution.objects.filter(job_id=job_id).order_by("id"))


def run_counts(prefix: str) -> Counter[str]:
    """How many handler executions each job id starting with ``prefix`` had."""
    return Counter(
        Execution.objects.filter(job_id__startswith=prefix).values_list("job_id", flat=True)
    )


def job(job_id: str) -> Job:
    return Job.objects.get(pk=job_id)


def job_state(job_id: str) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


def last_error(job_id: str) -> str:
    return str(job(job_id).errors[-1]["error"])


def ms(value: Any) -> int:
    """A store instant in Unix milliseconds, exactly as the coordinator records it."""
    from headgate_django.store.workflows import to_ms

    result = to_ms(value)
    assert result is not None
    return result


def claim(queue: str) -> Any:
    """Claim the one available job of ``queue`` as a worker would (it is then running)."""
    from datetime import timedelta

    from headgate_django import store
    from headgate_django.registry import registered_kinds

    (claimed,) = store.job_claim(
        worker_id="test-claim",
        limit=1,
        lease_ttl=timedelta(minutes=5),
        queues=[queue],
        kinds=registered_kinds(),
    )
    return claimed


def finish(claimed: Any) -> str:
    """Run the handler of a job claimed with :func:`claim` and settle it; the label."""
    from headgate_django.context import JobContext
    from headgate_django.worker import execute
    from headgate_django.worker.settle import settle

    ctx = JobContext(claimed, worker_id="test-claim")
    outcome = execute.run_attempt(ctx, claimed.payload, claimed.schema_version, None)
    return settle(claimed, outcome)


def expire_lease(job_id: str) -> None:
    """Make a running job's lease lapse now (store clock), as if its worker had died."""
    from datetime import timedelta

    from headgate_django.store import db_now

    Job.objects.filter(pk=job_id).update(lease_expires_at=db_now() - timedelta(seconds=1))


def recorded(workflow_id: str) -> set[str]:
    """Nodes whose completion the coordinator has checkpointed (empty before its first tick)."""
    row = WorkflowCheckpoint.objects.filter(pk=workflow_id).first()
    return set(row.completed) if row is not None else set()

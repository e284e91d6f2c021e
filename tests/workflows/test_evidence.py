"""Completion evidence: the coordinator's checkpoint, not the child's row, says a node
completed, so an evicted row stays ``completed``; an absent row with no evidence is
``missing`` and fails the workflow."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest

from headgate_django import enqueue, store, testing
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow, workflow_node
from tests.app import tasks
from tests.workflows.helpers import (
    checkpoint,
    claim,
    coordinator,
    finish,
    job_state,
    last_error,
    ms,
    node_states,
    run,
)


def short_lived(workflow_id: str) -> Workflow:
    """a → (b, c) with a 1 ms retention: finished rows become evictable at once."""
    return (
        Workflow(workflow_id)
        .retention(timedelta(milliseconds=1))
        .add("a", replace(tasks.echo.envelope(value="a"), retention=timedelta(0)), [])
        .add("b", replace(tasks.echo.envelope(value="b"), retention=timedelta(0)), ["a"])
        .add("c", replace(tasks.echo.envelope(value="c"), queue="slow"), ["a"])
    )


def evict() -> dict[str, int]:
    time.sleep(0.01)  # past the 1 ms retention on the store clock
    return store.job_evict_retained()


@pytest.mark.django_db
def test_an_evicted_completed_child_stays_completed_while_a_sibling_runs():
    batch = short_lived("ev").prepare()
    # Retention 0 on a child is raised to the workflow retention, never kept at 0.
    assert [e.retention for e in batch.envelopes[1:3]] == [timedelta(milliseconds=1)] * 2
    enqueue(batch)
    testing.run_jobs(queues=["default", "headgate-workflow"])
    assert set(checkpoint("ev").completed) == {"a", "b"}
    finalized = {n: ms(Job.objects.get(pk=f"ev:{n}").finalized_at) for n in ("a", "b")}
    sibling = claim("slow")  # c is running while its siblings' rows are evicted
    assert job_state("ev:c") == "running"

    assert evict() == {"completed": 2}
    assert job_state("ev:a") is None and job_state("ev:b") is None
    snapshot = inspect_workflow("ev")
    assert snapshot.node("b").state == "completed"
    assert snapshot.node("b").completed_at_ms == finalized["b"]
    assert snapshot.node("c").state == "running"

    assert finish(sibling) == "completed"
    run()
    snapshot = inspect_workflow("ev")
    assert snapshot.coordinator_state == "completed"
    assert {n.name: n.state for n in snapshot.nodes} == dict.fromkeys("abc", "completed")
    assert workflow_node("ev", "a").completed_at_ms == finalized["a"]
    assert workflow_node("ev", "a").completed_at is not None


@pytest.mark.django_db
def test_a_row_evicted_before_the_coordinator_recorded_it_is_missing_and_fails():
    enqueue(short_lived("lost").prepare())
    testing.run_one(queues=["headgate-workflow"])  # promotes a
    testing.run_jobs(queues=["default"])  # a completes before any tick records it
    assert "a" not in checkpoint("lost").completed
    assert evict() == {"completed": 1}
    run()
    assert node_states("lost") == {"a": "missing", "b": "missing", "c": "missing"}
    assert coordinator("lost").state == "archived"
    assert last_error("lost:coordinator") == "node 'a' is missing"
    assert inspect_workflow("lost").node("a").completed_at_ms is None


@pytest.mark.django_db
def test_a_deleted_pending_node_is_missing_and_fails_the_workflow():
    enqueue(
        Workflow("gone")
        .add("a", tasks.echo.envelope(), [])
        .add("b", tasks.echo.envelope(), ["a"])
        .prepare()
    )
    Job.objects.filter(pk="gone:b").delete()
    run()
    assert node_states("gone") == {"a": "completed", "b": "missing"}
    assert last_error("gone:coordinator") == "node 'b' is missing"


@pytest.mark.django_db
def test_evidence_is_recorded_before_dependents_are_promoted():
    """The checkpoint that records a completion commits with (not after) the promotion of
    its dependents: no promoted node without the evidence that justified it."""
    enqueue(
        Workflow("order")
        .add("a", tasks.echo.envelope(), [])
        .add("b", tasks.echo.envelope(), ["a"])
        .prepare()
    )
    testing.run_one(queues=["headgate-workflow"])
    testing.run_one(queues=["default"])  # a completes
    assert job_state("order:b") == "pending"
    testing.run_one(queues=["headgate-workflow"])
    assert job_state("order:b") == "available"
    a = Job.objects.get(pk="order:a")
    assert checkpoint("order").completed == {"a": ms(a.finalized_at)}

"""Inspection (payload-free) and the bounded workflow history."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from headgate_django import DefinitionError, NotFoundError, enqueue, testing
from headgate_django.workflows import (
    Workflow,
    WorkflowSnapshot,
    inspect_workflow,
    list_workflows,
    workflow_dependencies,
    workflow_dependents,
    workflow_events,
    workflow_node,
)
from tests.app import tasks
from tests.workflows.helpers import job, ms, run

SECRET = "s3cret-payload-value"


def daily_import(workflow_id: str = "daily-import") -> Workflow:
    return (
        Workflow(workflow_id)
        .coordinator_queue("workflows")
        .add("extract", tasks.echo.envelope(value=SECRET), [])
        .add("customers", tasks.echo.envelope(value=SECRET), ["extract"])
        .add("orders", tasks.echo.envelope(value=SECRET), ["extract"])
        .add("index", tasks.echo.envelope(value=SECRET), ["customers", "orders"])
    )


@pytest.mark.django_db
def test_snapshot_reports_graph_states_and_edges_without_payloads():
    enqueue(daily_import().prepare())
    snapshot = inspect_workflow("daily-import")
    assert isinstance(snapshot, WorkflowSnapshot)
    assert snapshot.workflow_id == "daily-import"
    assert snapshot.coordinator_job_id == "daily-import:coordinator"
    assert snapshot.coordinator_state == "available"
    assert (snapshot.revision, snapshot.generation) == (1, 1)
    assert [n.name for n in snapshot.nodes] == ["extract", "customers", "orders", "index"]
    index = snapshot.node("index")
    assert index.job_id == "daily-import:index"
    assert index.kind == "task"
    assert index.job_kind == "test.echo"
    assert index.state == "pending"
    assert index.completed_at is None
    assert snapshot.dependencies("index") == ["customers", "orders"]
    assert snapshot.dependents("extract") == ["customers", "orders"]
    assert snapshot.dependents("index") == []
    assert snapshot.node("nope") is None
    assert snapshot.dependencies("nope") is None
    assert SECRET not in repr(snapshot)
    assert SECRET not in repr(dataclasses.asdict(snapshot))

    run()
    snapshot = inspect_workflow("daily-import")
    assert snapshot.coordinator_state == "completed"
    extract = snapshot.node("extract")
    assert extract.state == "completed"
    assert extract.completed_at_ms == ms(job("daily-import:extract").finalized_at)
    assert extract.completed_at == job("daily-import:extract").finalized_at.replace(
        microsecond=job("daily-import:extract").finalized_at.microsecond // 1000 * 1000
    )


@pytest.mark.django_db
def test_single_relation_helpers():
    enqueue(daily_import().prepare())
    assert workflow_node("daily-import", "orders").dependencies == ("extract",)
    assert workflow_dependencies("daily-import", "index") == ["customers", "orders"]
    assert workflow_dependents("daily-import", "extract") == ["customers", "orders"]
    with pytest.raises(NotFoundError):
        workflow_node("daily-import", "nope")
    with pytest.raises(NotFoundError):
        inspect_workflow("no-such-workflow")
    with pytest.raises(NotFoundError):
        workflow_events("no-such-workflow")


@pytest.mark.django_db
def test_snapshot_shows_virtual_node_configuration():
    enqueue(
        Workflow("virtual")
        .add("prepare", tasks.echo.envelope(), [])
        .add_signal("approval", "approved", ["prepare"])
        .add_timer_at("window", 1_900_000_000_000, [])
        .add_timer_after("cooldown", timedelta(minutes=30), ["approval"])
        .add_condition("eligible", "completed.prepare", ["prepare"])
        .prepare()
    )
    snapshot = inspect_workflow("virtual")
    assert snapshot.node("approval").kind == "signal"
    assert snapshot.node("approval").signal == "approved"
    assert snapshot.node("window").wake_at_ms == 1_900_000_000_000
    assert snapshot.node("window").state == "scheduled"
    assert snapshot.node("cooldown").delay_ms == 30 * 60 * 1000
    assert snapshot.node("eligible").condition == "completed.prepare"
    assert snapshot.node("eligible").job_kind == "headgate:condition"


@pytest.mark.django_db
def test_list_workflows_is_cursor_paginated_and_bounded():
    for i in range(5):
        enqueue(Workflow(f"wf-{i}").add("a", tasks.noop.envelope(), []).prepare())
    tasks.noop.enqueue()  # an ordinary job is not a workflow
    first = list_workflows(limit=2)
    assert [w.workflow_id for w in first.items] == ["wf-0", "wf-1"]
    assert first.next_cursor == "wf-1"
    second = list_workflows(first.next_cursor, 2)
    assert [w.workflow_id for w in second.items] == ["wf-2", "wf-3"]
    last = list_workflows(second.next_cursor, 2)
    assert [w.workflow_id for w in last.items] == ["wf-4"]
    assert last.next_cursor is None
    assert first.items[0].coordinator_job_id == "wf-0:coordinator"
    assert first.items[0].coordinator_state == "available"
    assert len(list_workflows(limit=200).items) == 5
    for bad in (0, 201):
        with pytest.raises(DefinitionError):
            list_workflows(limit=bad)


@pytest.mark.django_db
def test_history_sequence_continues_across_coordinator_attempts():
    enqueue(
        Workflow("seq")
        .add("a", tasks.noop.envelope(), [])
        .add("b", tasks.noop.envelope(), ["a"])
        .prepare()
    )
    testing.run_one(queues=["headgate-workflow"])
    first = workflow_events("seq")
    run()
    events = workflow_events("seq")
    assert events[: len(first)] == first
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert [(e["event"], e.get("node")) for e in events] == [
        ("workflow_started", None),
        ("node_completed", "a"),
        ("node_completed", "b"),
        ("workflow_succeeded", None),
    ]

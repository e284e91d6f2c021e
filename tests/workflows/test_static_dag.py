"""Static DAGs: the builder's batch, atomic enqueue, the coordinator's ordering, the
event-driven wake-up and the poll safety net."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings

from headgate_django import IdConflictError, enqueue, store, testing
from headgate_django.models import Job, WorkflowCheckpoint
from headgate_django.store.maintenance import job_make_due
from headgate_django.workflows import Workflow, inspect_workflow, workflow_events
from tests.app import tasks
from tests.app.models import Execution
from tests.workflows.helpers import checkpoint, coordinator, job, ms, run

DAILY_DEPS = {"extract": [], "customers": ["extract"], "orders": ["extract"]}
DAILY_DEPS["index"] = ["customers", "orders"]


def daily_import(seconds: float = 0.0) -> Workflow:
    """The seed's ``daily-import`` graph; each stage records when it started and ended."""
    workflow = Workflow("daily-import").coordinator_queue("workflows")
    for name, deps in DAILY_DEPS.items():
        workflow.add(name, tasks.sleeper.envelope(seconds=seconds, label=name), deps)
    return workflow


def assert_ran_in_dependency_order(workflow_id: str) -> None:
    """Every stage started (by the handler's own record and by the store's claim) only
    after each of its dependencies had finished (handler record and store completion)."""
    records = {
        e.label: e.id for e in Execution.objects.filter(job_id__startswith=f"{workflow_id}:")
    }
    for name, deps in DAILY_DEPS.items():
        row = job(f"{workflow_id}:{name}")
        assert row.state == "completed"
        for dep in deps:
            dep_row = job(f"{workflow_id}:{dep}")
            assert records[f"start:{name}"] > records[f"end:{dep}"], (name, dep)
            assert row.claimed_at >= dep_row.finalized_at, (name, dep)


@pytest.mark.django_db
def test_daily_import_runs_end_to_end_in_dependency_order():
    batch = daily_import().prepare()
    ids = enqueue(batch)
    assert ids == [
        "daily-import:coordinator",
        "daily-import:extract",
        "daily-import:customers",
        "daily-import:orders",
        "daily-import:index",
    ]
    report = run()
    assert report.counts["completed"] == 5, report.outcomes
    assert_ran_in_dependency_order("daily-import")

    snapshot = inspect_workflow("daily-import")
    assert snapshot.coordinator_state == "completed"
    assert (snapshot.revision, snapshot.generation, snapshot.failed) == (1, 1, False)
    for name in DAILY_DEPS:
        node = snapshot.node(name)
        assert node.state == "completed"
        # The evidence is the store's own finalized_at, not a worker clock.
        assert node.completed_at_ms == ms(job(f"daily-import:{name}").finalized_at)
    events = workflow_events("daily-import")
    assert [e["event"] for e in events] == [
        "workflow_started",
        *["node_completed"] * 4,
        "workflow_succeeded",
    ]
    assert [e["sequence"] for e in events] == list(range(1, 7))
    nodes = [e["node"] for e in events[1:5]]
    assert (nodes[0], sorted(nodes[1:3]), nodes[3]) == ("extract", ["customers", "orders"], "index")


@pytest.mark.django_db
def test_prepare_builds_one_batch_coordinator_first_children_pending():
    batch = (
        Workflow("shape")
        .add("short", tasks.echo.envelope(), [])
        .add("long", tasks.ephemeral.envelope(), ["short"])
        .add("kept", _with_retention(tasks.echo.envelope(), timedelta(days=30)), ["short"])
        .prepare()
    )
    coordinator_env, *children = batch.envelopes
    assert coordinator_env.id == "shape:coordinator"
    assert coordinator_env.kind == "headgate:workflow"
    assert coordinator_env.queue == "headgate-workflow"  # the default coordinator queue
    assert [c.id for c in children] == ["shape:short", "shape:long", "shape:kept"]
    assert all(c.pending and c.workflow_id == "shape" for c in children)
    # Child retention is raised to at least the workflow retention (7 days by default).
    assert [c.retention for c in children] == [
        timedelta(days=7),
        timedelta(days=7),
        timedelta(days=30),
    ]
    enqueue(batch)
    assert {j.id: j.state for j in Job.objects.filter(workflow_id="shape")} == {
        "shape:coordinator": "available",
        "shape:short": "pending",
        "shape:long": "pending",
        "shape:kept": "pending",
    }


@pytest.mark.django_db
def test_workflow_retention_raises_child_retention_and_caller_ids_are_kept():
    env = replace(tasks.echo.envelope(), id="caller-chosen-id")
    batch = (
        Workflow("kept")
        .retention(timedelta(days=14))
        .add("a", env, [])
        .add("b", tasks.echo.envelope(), ["a"])
        .prepare()
    )
    assert [e.retention for e in batch.envelopes] == [timedelta(days=14)] * 3
    enqueue(batch)
    run()
    assert job("caller-chosen-id").state == "completed"
    assert inspect_workflow("kept").node("a").job_id == "caller-chosen-id"
    assert inspect_workflow("kept").coordinator_state == "completed"


def _with_retention(env, retention):
    return replace(env, retention=retention)


@pytest.mark.django_db
def test_enqueue_joins_the_callers_transaction():
    batch = daily_import().prepare()
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue(batch)
        assert Job.objects.filter(workflow_id="daily-import").count() == 5
        raise RuntimeError("the caller rolls back")
    assert not Job.objects.filter(workflow_id="daily-import").exists()


@pytest.mark.django_db
def test_a_conflicting_batch_enqueues_nothing():
    enqueue(replace(tasks.echo.envelope(value="other"), id="daily-import:orders"))
    with pytest.raises(IdConflictError):
        enqueue(daily_import().prepare())
    assert list(Job.objects.filter(workflow_id="daily-import")) == []
    assert not WorkflowCheckpoint.objects.exists()


@pytest.mark.django_db
@override_settings(HEADGATE={"COORDINATOR_POLL": timedelta(hours=1)})
def test_a_child_completion_wakes_its_coordinator_in_the_same_transaction():
    enqueue(
        Workflow("wake")
        .add("a", tasks.echo.envelope(), [])
        .add("b", tasks.echo.envelope(), ["a"])
        .prepare()
    )
    assert testing.run_one(queues=["headgate-workflow"])[1] == "snoozed"
    assert coordinator("wake").state == "scheduled"  # an hour away
    assert testing.run_one(queues=["default"]) == ("wake:a", "completed")
    assert coordinator("wake").state == "available"  # woken by a's completion
    # With an hour-long poll, only the wake-ups can finish the workflow.
    report = testing.run_jobs()
    assert coordinator("wake").state == "completed", report.outcomes


@pytest.mark.django_db
@override_settings(HEADGATE={"COORDINATOR_POLL": timedelta(hours=1)})
def test_a_wake_up_during_a_running_tick_is_not_lost():
    enqueue(Workflow("busy").add("a", tasks.echo.envelope(), []).prepare())
    testing.run_one(queues=["headgate-workflow"])  # promotes a, snoozes for an hour
    job_make_due(queues=["headgate-workflow"])
    (claimed,) = store.job_claim(
        worker_id="t", limit=1, lease_ttl=timedelta(minutes=1), queues=["headgate-workflow"]
    )
    assert claimed.ref.job_id == "busy:coordinator"
    # a completes while the coordinator is running (it already read a as available).
    assert testing.run_one(queues=["default"]) == ("busy:a", "completed")
    store.job_snooze(claimed.ref, delay=timedelta(hours=1))
    assert coordinator("busy").state == "available"


@pytest.mark.django_db
@override_settings(HEADGATE={"COORDINATOR_POLL": timedelta(seconds=5)})
def test_the_poll_is_the_safety_net_when_nothing_wakes_the_coordinator():
    enqueue(Workflow("poll").add("a", tasks.echo.envelope(), []).prepare())
    before = store.db_now()
    testing.run_one(queues=["headgate-workflow"])
    row = coordinator("poll")
    assert row.state == "scheduled"
    assert (
        before + timedelta(seconds=5) <= row.scheduled_at <= store.db_now() + timedelta(seconds=5)
    )
    # A change no hook sees (here: the row written directly) is found by the next poll.
    Job.objects.filter(pk="poll:a").update(state="completed", finalized_at=store.db_now())
    assert coordinator("poll").state == "scheduled"
    run()
    assert coordinator("poll").state == "completed"
    assert checkpoint("poll").completed.keys() == {"a"}

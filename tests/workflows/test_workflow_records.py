"""The records a workflow leaves beside its jobs (checkpoint, signal emissions, graft
decisions) are kept a while after its rows are evicted, for links and inspection, then
deleted by the ``workflows-prune`` duty. Meanwhile its id is free again, as a job's is: a
new workflow of that id starts from nothing, not from the earlier one's records."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from headgate_django import enqueue, store
from headgate_django.models import DutyLease, Graft, Job, SignalEmission, WorkflowCheckpoint
from headgate_django.store.workflow_records import (
    workflow_records_prune,
    workflow_records_prune_without_checkpoint,
)
from headgate_django.worker.duties import DutyRunner, default_duties
from headgate_django.workflows import (
    Workflow,
    cancel_workflow,
    emit_signal,
    inspect_workflow,
    list_signals,
)
from tests.app import tasks
from tests.workflows.helpers import node_states, run, run_counts


def short_lived(workflow_id: str) -> Workflow:
    """go (a signal) → a → b, every row evictable 1 ms after the workflow ends (with
    ``RETENTION`` 0, each node's retention is the workflow's)."""
    return (
        Workflow(workflow_id)
        .retention(timedelta(milliseconds=1))
        .add_signal("go", "go", [])
        .add("a", tasks.record_run.envelope(label="a"), ["go"])
        .add("b", tasks.record_run.envelope(label="b"), ["a"])
    )


@pytest.fixture(autouse=True)
def _no_default_retention(settings):
    settings.HEADGATE = {"RETENTION": timedelta(0)}


def finish_and_evict(workflow_id: str) -> None:
    enqueue(short_lived(workflow_id).prepare())
    emit_signal(workflow_id, "go")
    run()
    assert inspect_workflow(workflow_id).coordinator_state == "completed"
    time.sleep(0.01)  # past the 1 ms retention on the store clock
    store.job_evict_retained()
    assert not Job.objects.filter(workflow_id=workflow_id).exists()
    assert WorkflowCheckpoint.objects.filter(pk=workflow_id).exists()  # kept for links


@pytest.mark.django_db
def test_a_workflow_enqueued_again_after_eviction_runs_its_nodes_again():
    finish_and_evict("again")
    enqueue(short_lived("again").prepare())
    assert inspect_workflow("again").coordinator_state == "available"
    assert set(node_states("again").values()) == {"pending"}  # no evidence of the old run
    run()
    assert inspect_workflow("again").coordinator_state == "scheduled"  # waits for go
    assert node_states("again") == {"go": "pending", "a": "pending", "b": "pending"}

    emit_signal("again", "go")  # the same key as the earlier workflow's signal
    run()
    assert inspect_workflow("again").coordinator_state == "completed"
    assert node_states("again") == dict.fromkeys(["go", "a", "b"], "completed")
    assert run_counts("again:") == {"again:a": 2, "again:b": 2}  # once per workflow
    assert len(list_signals("again")) == 1


@pytest.mark.django_db
def test_the_earlier_workflows_grafts_and_signals_are_not_the_new_ones():
    finish_and_evict("stale")
    graft_record("stale")
    # The earlier workflow's records are older than the new one's coordinator on a store
    # clock of millisecond resolution (SQLite's), as they are after any real retention: a
    # record of the same millisecond is the new workflow's (its first signal may be).
    time.sleep(0.01)
    enqueue(short_lived("stale").prepare())
    # A signal sent to the new workflow before its coordinator first ran is its own.
    receipt = emit_signal("stale", "go")
    assert receipt.inserted and receipt.promoted
    run()
    assert inspect_workflow("stale").coordinator_state == "completed"
    assert [s.id for s in list_signals("stale")] == [receipt.emission.id]
    assert not Graft.objects.filter(workflow_id="stale").exists()
    assert SignalEmission.objects.filter(workflow_id="stale").count() == 1


def records(workflow_id: str) -> tuple[int, int, int]:
    return (
        WorkflowCheckpoint.objects.filter(pk=workflow_id).count(),
        SignalEmission.objects.filter(workflow_id=workflow_id).count(),
        Graft.objects.filter(workflow_id=workflow_id).count(),
    )


def graft_record(workflow_id: str) -> None:
    Graft.objects.create(
        workflow_id=workflow_id,
        revision=2,
        receipt_job_id=f"{workflow_id}:graft:2",
        nodes=[],
        decided_at=store.db_now(),
    )


@pytest.mark.django_db
def test_the_records_of_an_evicted_workflow_go_after_the_workflow_retention(settings):
    finish_and_evict("done")
    graft_record("done")
    enqueue(short_lived("live").prepare())
    run()  # its first tick writes its checkpoint; it waits for its signal
    assert records("done") == (1, 1, 1) and records("live") == (1, 0, 0)

    assert workflow_records_prune(older_than=timedelta(days=7)) == []  # kept for links
    time.sleep(0.01)
    assert workflow_records_prune(older_than=timedelta(milliseconds=5)) == ["done"]
    assert records("done") == (0, 0, 0)
    assert records("live") == (1, 0, 0)  # its coordinator is there

    finish_and_evict("by-duty")
    settings.HEADGATE = {"RETENTION": timedelta(0), "WORKFLOW_RETENTION": timedelta(milliseconds=5)}
    time.sleep(0.01)
    runner = DutyRunner("pruner", [d for d in default_duties() if d.name == "workflows-prune"])
    runner.tick()
    assert records("by-duty") == (0, 0, 0)
    assert DutyLease.objects.get(pk="workflows-prune").last_result == {
        "pruned": 1,
        "without_checkpoint": 0,
        "more": False,
    }


@pytest.mark.django_db
def test_a_prune_is_bounded_and_says_when_more_remain():
    for n in range(3):
        finish_and_evict(f"many-{n}")
    time.sleep(0.01)
    assert len(workflow_records_prune(older_than=timedelta(milliseconds=5), limit=2)) == 2
    assert len(workflow_records_prune(older_than=timedelta(milliseconds=5), limit=2)) == 1


@pytest.mark.django_db
def test_the_records_of_a_workflow_cancelled_before_its_first_tick_are_pruned_too(settings):
    """Cancelled before its coordinator ever ran, a workflow writes no checkpoint, and the
    prune found workflows only through their checkpoints: its signal emissions (and any
    graft record) stayed for ever."""
    enqueue(short_lived("early").prepare())
    emit_signal("early", "go")  # before the first tick: recorded, the signal job released
    graft_record("early")
    cancel_workflow("early")
    enqueue(short_lived("waiting").prepare())  # nor ticked yet, but its coordinator is there
    emit_signal("waiting", "go")
    time.sleep(0.01)
    store.job_evict_retained()
    assert not Job.objects.filter(workflow_id="early").exists()
    assert records("early") == (0, 1, 1) and records("waiting") == (0, 1, 0)

    settings.HEADGATE = {"RETENTION": timedelta(0), "WORKFLOW_RETENTION": timedelta(days=7)}
    runner = DutyRunner("pruner", [d for d in default_duties() if d.name == "workflows-prune"])
    runner.tick()
    assert records("early") == (0, 1, 1)  # kept for the workflow retention
    settings.HEADGATE = {"RETENTION": timedelta(0), "WORKFLOW_RETENTION": timedelta(milliseconds=5)}
    time.sleep(0.01)
    runner.duties[0].last = float("-inf")
    runner.tick()
    assert records("early") == (0, 0, 0)
    assert records("waiting") == (0, 1, 0)  # its coordinator is there
    assert DutyLease.objects.get(pk="workflows-prune").last_result == {
        "pruned": 0,
        "without_checkpoint": 2,
        "more": False,
    }


@pytest.mark.django_db
def test_a_prune_of_records_without_a_checkpoint_is_bounded():
    for n in range(3):
        graft_record(f"gone-{n}")
    SignalEmission.objects.create(
        workflow_id="gone-0",
        signal="go",
        idempotency_key="k",
        content_hash="",
        emitted_at=store.db_now(),
    )
    time.sleep(0.01)
    batches = [
        workflow_records_prune_without_checkpoint(older_than=timedelta(milliseconds=5), limit=3)
        for _ in range(3)
    ]
    assert batches == [3, 1, 0]

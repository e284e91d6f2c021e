"""Failure propagation: a failed node dooms its descendants (never-run ones are deleted),
independent branches still finish and keep their results, then the coordinator archives."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import override_settings

from headgate_django import enqueue, store, testing
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow
from tests.app import tasks
from tests.workflows.helpers import (
    claim,
    coordinator,
    event_names,
    expire_lease,
    finish,
    job_state,
    last_error,
    node_states,
    run,
    run_counts,
    runs,
)


def failing() -> object:
    return replace(tasks.always_fail.envelope(message="upstream broke"), max_attempts=1)


@pytest.mark.django_db
def test_upstream_failure_deletes_descendants_and_keeps_independent_results():
    record = tasks.record_run.envelope
    enqueue(
        Workflow("etl")
        .add("root", record(label="root"), [])
        .add("bad", failing(), ["root"])
        .add("child", record(label="child"), ["bad"])
        .add("grandchild", record(label="grandchild"), ["child"])
        .add("good", record(label="good"), ["root"])
        .add("good2", record(label="good2"), ["good"])
        .add("join", record(label="join"), ["bad", "good"])
        .add("lone", record(label="lone"), [])
        .prepare()
    )
    run()

    assert node_states("etl") == {
        "root": "completed",
        "bad": "archived",
        "child": "missing",  # deleted: it never ran
        "grandchild": "missing",
        "good": "completed",
        "good2": "completed",  # promoted after the failure: independent work finishes
        "join": "missing",
        "lone": "completed",
    }
    for name in ("child", "grandchild", "join"):
        assert job_state(f"etl:{name}") is None
        assert runs(f"etl:{name}") == []
    for name in ("root", "good", "good2", "lone"):
        assert Job.objects.get(pk=f"etl:{name}").result == {"label": name}
    assert not Job.objects.filter(workflow_id="etl", state="pending").exists()

    snapshot = inspect_workflow("etl")
    assert snapshot.coordinator_state == "archived"
    assert snapshot.failed is True
    assert snapshot.node("bad").completed_at_ms is None
    assert snapshot.node("good2").completed_at_ms is not None
    assert coordinator("etl").errors[-1]["kind"] == "skip"
    assert last_error("etl:coordinator") == "node 'bad' is archived"
    assert event_names("etl")[-1] == "workflow_failed"
    assert event_names("etl").count("workflow_failed") == 1


@pytest.mark.django_db
def test_a_failed_workflow_waits_for_running_independent_work_before_archiving():
    enqueue(
        Workflow("busy")
        .add("bad", failing(), [])
        .add("after-bad", tasks.echo.envelope(), ["bad"])
        .add("slow", replace(tasks.echo.envelope(value="kept"), queue="slow"), [])
        .prepare()
    )
    testing.run_one(queues=["headgate-workflow"])  # promotes bad and slow
    slow = claim("slow")  # slow is running when bad fails
    testing.run_jobs(queues=["default", "headgate-workflow"])
    assert job_state("busy:bad") == "archived"
    assert job_state("busy:after-bad") is None
    assert coordinator("busy").state == "scheduled"  # not archived while slow runs
    assert finish(slow) == "completed"
    run()
    assert coordinator("busy").state == "archived"
    assert node_states("busy") == {"bad": "archived", "after-bad": "missing", "slow": "completed"}
    assert Job.objects.get(pk="busy:slow").result == {"value": "kept", "attempt": 1}


def _cancel(job_id: str) -> None:
    store.job_cancel(job_id)


def _delete(job_id: str) -> None:
    Job.objects.filter(pk=job_id).delete()


def _quarantine(job_id: str) -> None:
    claimed = claim("victim")
    assert claimed.ref.job_id == job_id
    expire_lease(job_id)
    with override_settings(HEADGATE={"CRASH_LIMIT": 1}):
        store.job_reclaim_expired()


FAILURES = {
    "archived": (failing(), None),
    "cancelled": (tasks.echo.envelope(), _cancel),
    "undecodable": (replace(tasks.echo.envelope(), schema_version=5), None),
    "quarantined": (tasks.echo.envelope(), _quarantine),
    "missing": (tasks.echo.envelope(), _delete),
}


@pytest.mark.django_db
@pytest.mark.parametrize("state", FAILURES)
def test_every_failed_terminal_state_fails_the_workflow(state):
    envelope, breaker = FAILURES[state]
    enqueue(
        Workflow("wf")
        .add("victim", replace(envelope, queue="victim"), [])
        .add("after", tasks.record_run.envelope(), ["victim"])
        # Another payload: a quarantine covers every waiting job with the same fingerprint.
        .add("other", tasks.echo.envelope(value="other"), [])
        .prepare()
    )
    testing.run_one(queues=["headgate-workflow"])  # promotes victim and other
    if breaker is not None:
        breaker("wf:victim")
    run()
    assert node_states("wf") == {"victim": state, "after": "missing", "other": "completed"}
    assert coordinator("wf").state == "archived"
    assert last_error("wf:coordinator") == f"node 'victim' is {state}"
    assert run_counts("wf:") == {}  # "after" never ran (echo records nothing)


@pytest.mark.django_db
def test_a_node_that_recovers_through_retries_does_not_fail_the_workflow():
    enqueue(
        Workflow("flaky")
        .add("first", tasks.fail_times.envelope(times=2), [])
        .add("second", tasks.echo.envelope(), ["first"])
        .prepare()
    )
    run()
    assert coordinator("flaky").state == "completed"
    assert [r.attempt for r in runs("flaky:first")] == [1, 2, 3]
    assert node_states("flaky") == {"first": "completed", "second": "completed"}


@pytest.mark.django_db
def test_retention_of_failed_nodes_is_the_workflow_retention():
    enqueue(Workflow("kept").retention(timedelta(days=9)).add("bad", failing(), []).prepare())
    run()
    bad = Job.objects.get(pk="kept:bad")
    assert bad.state == "archived"
    # Both instants come from the store clock within one statement (µs apart at most).
    assert timedelta(days=9) <= bad.expires_at - bad.finalized_at < timedelta(days=9, seconds=1)

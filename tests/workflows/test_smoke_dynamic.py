import pytest

from headgate_django import enqueue, testing
from headgate_django.workflows import (
    SignalEmission,
    Workflow,
    WorkflowGraft,
    emit_signal_with,
    inspect_workflow,
    list_signals,
    prepare_bundle,
    request_failed_subgraph_retry,
    submit_graft,
    workflow_events,
)
from tests.app import tasks


@pytest.mark.django_db
def test_onboarding_signal_and_graft():
    batch = (
        Workflow("onboarding:42")
        .add("prepare", tasks.echo.envelope(value="p"), [])
        .add_signal("approval", "approved", ["prepare"])
        .add("welcome", tasks.echo.envelope(value="w"), ["approval"])
        .prepare()
    )
    enqueue(batch)
    receipt = emit_signal_with(
        "onboarding:42",
        SignalEmission(
            "approved",
            "approval:ticket-1842",
            {"approved": True, "reviewer": "Ada"},
            {"emitter": "admin-api", "actor": "operator-42"},
        ),
    )
    assert receipt.matched == 1 and receipt.inserted and receipt.promoted == 1
    assert list_signals("onboarding:42")[0].payload["reviewer"] == "Ada"
    testing.run_jobs()
    snap = inspect_workflow("onboarding:42")
    assert snap.node("approval").state == "completed"
    assert snap.node("welcome").state == "completed"
    assert snap.coordinator_state == "completed"


@pytest.mark.django_db
def test_graft_then_complete():
    enqueue(
        Workflow("g:1")
        .add("a", tasks.echo.envelope(value=1), [])
        .add_signal("s", "go", ["a"])
        .prepare()
    )
    testing.run_jobs()
    submit_graft(WorkflowGraft("g:1", 1).add("b", tasks.echo.envelope(value=2), ["a"]).prepare())
    testing.run_jobs(include_scheduled=True)
    emit_signal_with("g:1", SignalEmission("go", "k1"))
    testing.run_jobs(include_scheduled=True)
    snap = inspect_workflow("g:1")
    assert snap.revision == 2
    assert snap.node("b").state == "completed"
    assert snap.coordinator_state == "completed"
    assert "workflow_graft_accepted" in [e["event"] for e in workflow_events("g:1")]


@pytest.mark.django_db
def test_failed_subgraph_retry():
    enqueue(
        Workflow("r:1")
        .failed_subgraph_retry()
        .add("create-account", tasks.echo.envelope(value=1), [])
        .add("send-welcome", tasks.fail_times.envelope(times=1), ["create-account"])
        .add("after", tasks.echo.envelope(value=3), ["send-welcome"])
        .prepare()
    )
    from dataclasses import replace  # noqa: F401

    from headgate_django.models import Job

    Job.objects.filter(pk="r:1:send-welcome").update(max_attempts=1)
    testing.run_jobs(include_scheduled=True)
    snap = inspect_workflow("r:1")
    assert snap.coordinator_state == "archived"
    assert snap.node("send-welcome").state == "archived"
    assert snap.node("after").state == "pending"
    receipt = request_failed_subgraph_retry("r:1", 1)
    assert receipt.generation == 2
    testing.run_jobs(include_scheduled=True)
    snap = inspect_workflow("r:1")
    assert snap.generation == 2 and snap.revision == 2
    assert snap.coordinator_state == "completed", workflow_events("r:1")
    assert Job.objects.get(pk="r:1:create-account").attempt == 0


@pytest.mark.django_db
def test_bundle_child_failure_fails_parent():
    child = Workflow("billing:42").add("charge", tasks.always_fail.envelope(), [])
    parent = (
        Workflow("checkout:42")
        .add_child("billing", "billing:42", [])
        .add("receipt", tasks.echo.envelope(value="r"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    testing.run_jobs(include_scheduled=True)
    assert inspect_workflow("billing:42").coordinator_state == "archived"
    assert inspect_workflow("checkout:42").coordinator_state == "archived"

"""``cancel_workflow``: every live node, then the coordinator, and by default every linked
child workflow (all parallel branches, transitively)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headgate_django import NotFoundError, enqueue, testing
from headgate_django.models import Job
from headgate_django.workflows import (
    Workflow,
    cancel_workflow,
    inspect_workflow,
    prepare_bundle,
    workflow_events,
)
from tests.app import tasks
from tests.workflows.helpers import claim, coordinator, finish, job_state, run


def states(workflow_id: str) -> dict[str, str]:
    return dict(Job.objects.filter(workflow_id=workflow_id).values_list("id", "state"))


@pytest.mark.django_db
def test_cancel_stops_live_nodes_then_the_coordinator_and_keeps_completed_ones():
    enqueue(
        Workflow("shop")
        .add("a", tasks.echo.envelope(), [])
        .add("b", replace(tasks.echo.envelope(value="b"), queue="slow"), ["a"])
        .add("c", tasks.echo.envelope(value="c"), ["a"])
        .add("d", tasks.echo.envelope(), ["b", "c"])
        .prepare()
    )
    testing.run_jobs(queues=["headgate-workflow", "default"])  # a, c done; b available
    running = claim("slow")  # b is running
    assert states("shop") == {
        "shop:coordinator": "scheduled",
        "shop:a": "completed",
        "shop:b": "running",
        "shop:c": "completed",
        "shop:d": "pending",
    }
    assert cancel_workflow("shop") == {"jobs": 3, "workflows": 1}
    assert states("shop") == {
        "shop:coordinator": "cancelled",
        "shop:a": "completed",
        "shop:b": "cancelled",
        "shop:c": "completed",
        "shop:d": "cancelled",
    }
    # The running attempt is fenced: what it reports afterwards does not land.
    assert finish(running) == "lost"
    assert job_state("shop:b") == "cancelled"
    assert run().outcomes == []
    assert inspect_workflow("shop").coordinator_state == "cancelled"
    # Cancelling again finds nothing live.
    assert cancel_workflow("shop") == {"jobs": 0, "workflows": 1}


def family() -> list[Workflow]:
    """checkout → (billing, shipping) in parallel; billing → fraud-check."""
    return [
        Workflow("checkout")
        .add_child("billing", "billing", [])
        .add_child("shipping", "shipping", [])
        .add("receipt", tasks.echo.envelope(), ["billing", "shipping"]),
        Workflow("billing")
        .add_child("fraud", "fraud-check", [])
        .add("charge", tasks.echo.envelope(), ["fraud"]),
        Workflow("shipping").add("label", replace(tasks.echo.envelope(), queue="held"), []),
        Workflow("fraud-check").add("score", replace(tasks.echo.envelope(), queue="held"), []),
    ]


@pytest.mark.django_db
def test_cancel_propagates_to_every_linked_child_workflow_by_default():
    enqueue(prepare_bundle(family()))
    testing.run_jobs(queues=["headgate-workflow"])  # links wait; leaf tasks available
    assert job_state("shipping:label") == "available"
    assert job_state("fraud-check:score") == "available"
    result = cancel_workflow("checkout")
    assert result["workflows"] == 4
    for workflow_id in ("checkout", "billing", "shipping", "fraud-check"):
        assert coordinator(workflow_id).state == "cancelled", workflow_id
        live = Job.objects.filter(workflow_id=workflow_id).exclude(state="cancelled")
        assert not live.exists(), list(live.values_list("id", "state"))
    assert result["jobs"] == Job.objects.filter(state="cancelled").count() == 11
    assert run().outcomes == []


@pytest.mark.django_db
def test_cancel_without_propagation_leaves_children_running():
    enqueue(prepare_bundle(family()))
    testing.run_jobs(queues=["headgate-workflow"])
    assert cancel_workflow("checkout", propagate_children=False) == {"jobs": 4, "workflows": 1}
    assert coordinator("checkout").state == "cancelled"
    for child in ("billing", "shipping", "fraud-check"):
        assert coordinator(child).state in {"scheduled", "available"}, child
    run()
    for child in ("billing", "shipping", "fraud-check"):
        assert coordinator(child).state == "completed", child
    assert coordinator("checkout").state == "cancelled"


@pytest.mark.django_db
def test_cancel_of_an_unknown_workflow_is_not_found():
    with pytest.raises(NotFoundError):
        cancel_workflow("nothing-here")


@pytest.mark.django_db
def test_cancel_reaches_grafted_nodes_and_pending_receipts():
    from headgate_django.workflows import WorkflowGraft

    enqueue(
        Workflow("grown")
        .add("a", tasks.echo.envelope(), [])
        .add_signal("hold", "done", ["a"])
        .prepare()
    )
    run()
    enqueue(WorkflowGraft("grown", 1).add("b", tasks.echo.envelope(value="b"), ["hold"]).prepare())
    testing.run_jobs(queues=["headgate-workflow"], include_scheduled=True)  # accepted
    assert inspect_workflow("grown").node("b").state == "pending"
    # A second graft waits, unaccepted, for the coordinator.
    enqueue(WorkflowGraft("grown", 2).add("c", tasks.echo.envelope(value="c"), ["a"]).prepare())
    assert job_state("grown:graft:3") == "pending"

    cancel_workflow("grown")
    live = Job.objects.filter(workflow_id="grown").exclude(state__in=["completed", "cancelled"])
    assert not live.exists(), list(live.values_list("id", "state"))
    assert job_state("grown:b") == "cancelled"
    assert run().outcomes == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("retry", [False, True], ids=["plain", "failed-subgraph-retry"])
def test_a_coordinator_that_ticks_during_the_cancel_does_not_turn_it_into_a_failure(
    monkeypatch, retry
):
    # A worker may run the coordinator the instant the nodes are cancelled: it must not
    # see cancelled nodes of a live workflow and archive it as failed (which would also
    # make a failed-subgraph-retry workflow retryable instead of cancelled).
    from headgate_django.workflows import cancel as cancel_module

    workflow = Workflow("cx").add("a", tasks.echo.envelope(), []).add_signal("s", "go", ["a"])
    enqueue((workflow.failed_subgraph_retry() if retry else workflow).prepare())
    run()
    cancel_many = cancel_module.job_cancel_many

    def coordinator_runs_after_each_call(job_ids):
        cancelled = cancel_many(job_ids)
        testing.run_jobs(queues=["headgate-workflow"], include_scheduled=True)
        return cancelled

    monkeypatch.setattr(cancel_module, "job_cancel_many", coordinator_runs_after_each_call)
    cancel_workflow("cx")
    assert coordinator("cx").state == "cancelled"
    assert "workflow_failed" not in [e["event"] for e in workflow_events("cx")]

"""The job ids the workflow layer keeps for itself: ``{id}:coordinator`` and the graft and
retry receipts ``{id}:graft:{n}`` / ``{id}:retry:{n}``. A node may not take one, and a job
that merely sits at such an id is not mistaken for a receipt."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headgate_django import enqueue
from headgate_django.exceptions import GraphError
from headgate_django.workflows import Workflow, WorkflowGraft
from tests.app import tasks
from tests.workflows.helpers import event_names, job_state, node_states, run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("name", ["coordinator", "graft:2", "retry:7"])
def test_a_node_cannot_take_a_reserved_job_id(name: str) -> None:
    workflow = Workflow("reserved:1").add(name, tasks.record_run.envelope(label="a"), [])
    with pytest.raises(GraphError, match=f"node '{name}'.*reserved"):
        workflow.prepare()


def test_an_explicit_envelope_id_cannot_take_a_reserved_job_id() -> None:
    envelope = replace(tasks.record_run.envelope(label="a"), id="reserved:2:graft:3")
    workflow = Workflow("reserved:2").add("a", envelope, [])
    with pytest.raises(GraphError, match="reserved"):
        workflow.prepare()


def test_a_graft_node_cannot_take_a_reserved_job_id() -> None:
    enqueue(Workflow("reserved:3").add("a", tasks.record_run.envelope(label="a"), []).prepare())
    graft = WorkflowGraft("reserved:3", 1).add("retry:2", tasks.record_run.envelope(label="b"))
    with pytest.raises(GraphError, match="reserved"):
        enqueue(graft.prepare())


def test_a_pending_job_at_a_receipt_id_is_not_taken_for_a_receipt() -> None:
    # An application job that happens to sit, pending, where the next graft receipt would.
    bystander = replace(tasks.record_run.envelope(label="x"), id="reserved:4:graft:2", pending=True)
    enqueue(bystander)
    enqueue(Workflow("reserved:4").add("a", tasks.record_run.envelope(label="a"), []).prepare())
    run()
    assert node_states("reserved:4") == {"a": "completed"}
    assert "workflow_graft_rejected" not in event_names("reserved:4")
    assert job_state("reserved:4:graft:2") == "pending"  # not deleted as a refused receipt


def test_a_plain_job_at_a_coordinator_id_is_not_a_workflow() -> None:
    from headgate_django import NotFoundError
    from headgate_django.workflows import cancel_workflow, emit_signal, inspect_workflow

    enqueue(replace(tasks.record_run.envelope(label="x"), id="plain:coordinator"))
    for call in (
        lambda: inspect_workflow("plain"),
        lambda: emit_signal("plain", "go"),
        lambda: cancel_workflow("plain"),
        lambda: enqueue(WorkflowGraft("plain", 1).add("b", tasks.noop.envelope()).prepare()),
    ):
        with pytest.raises(NotFoundError, match="workflow 'plain' does not exist"):
            call()
    assert job_state("plain:coordinator") == "available"

"""Child workflows: atomic bundles with cross-workflow cycle checks; a completed child
releases the parent's downstream work, a failed child fails the parent."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headgate_django import IdConflictError, enqueue
from headgate_django.exceptions import BatchError, CycleError, GraphError
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow, prepare_bundle
from tests.app import tasks
from tests.workflows.helpers import coordinator, job, job_state, last_error, node_states, run, runs


def checkout(charge=None) -> list[Workflow]:
    child = Workflow("billing:42").add(
        "charge", charge or tasks.record_run.envelope(label="charge"), []
    )
    parent = (
        Workflow("checkout:42")
        .add_child("billing", "billing:42", [])
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    return [parent, child]


@pytest.mark.django_db
def test_a_completed_child_releases_downstream_parent_work():
    bundle = prepare_bundle(checkout())
    assert [w.workflow_id for w in bundle.workflows] == ["checkout:42", "billing:42"]
    enqueue(bundle)
    run()
    assert coordinator("billing:42").state == "completed"
    assert coordinator("checkout:42").state == "completed"
    link = inspect_workflow("checkout:42").node("billing")
    assert (link.kind, link.child_workflow_id, link.state) == (
        "child_workflow",
        "billing:42",
        "completed",
    )
    assert job("checkout:42:billing").result == {
        "child_workflow_id": "billing:42",
        "outcome": "succeeded",
    }
    assert runs("checkout:42:receipt")[0].id > runs("billing:42:charge")[-1].id


@pytest.mark.django_db
def test_a_failed_child_archives_the_link_and_fails_the_parent():
    enqueue(prepare_bundle(checkout(replace(tasks.always_fail.envelope(), max_attempts=1))))
    run()
    assert coordinator("billing:42").state == "archived"
    assert job_state("checkout:42:billing") == "archived"
    assert "child workflow 'billing:42' is archived" in last_error("checkout:42:billing")
    assert coordinator("checkout:42").state == "archived"
    assert last_error("checkout:42:coordinator") == "node 'billing' is archived"
    assert node_states("checkout:42") == {"billing": "archived", "receipt": "missing"}
    assert runs("checkout:42:receipt") == []


@pytest.mark.django_db
@pytest.mark.parametrize("length", [2, 3])
def test_a_bundle_with_a_cross_workflow_cycle_is_refused_and_nothing_is_enqueued(length):
    ids = [f"wf-{i}" for i in range(length)]
    workflows = [
        Workflow(w)
        .add("work", tasks.noop.envelope(), [])
        .add_child("next", ids[(i + 1) % length], ["work"])
        for i, w in enumerate(ids)
    ]
    with pytest.raises(CycleError) as info:
        enqueue(prepare_bundle(workflows))
    assert "cycle" in str(info.value)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_bundle_links_must_resolve_inside_the_bundle():
    parent = Workflow("checkout:42").add_child("billing", "billing:42", [])
    with pytest.raises(GraphError) as info:
        prepare_bundle([parent])
    assert "'billing:42', which is not in the bundle" in str(info.value)
    with pytest.raises(CycleError):
        Workflow("self").add_child("me", "self", []).prepare()
    with pytest.raises(GraphError):
        prepare_bundle([*checkout(), Workflow("billing:42").add("x", tasks.noop.envelope(), [])])
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_bundle_is_created_all_or_nothing():
    enqueue(replace(tasks.echo.envelope(value="squatter"), id="billing:42:charge"))
    with pytest.raises(IdConflictError):
        enqueue(prepare_bundle(checkout()))
    assert list(Job.objects.values_list("id", flat=True)) == ["billing:42:charge"]


def test_a_bundle_holds_at_most_1000_jobs():
    big = [Workflow(f"w{i}") for i in range(3)]
    for workflow in big:
        for n in range(400):
            workflow.add(f"n{n}", tasks.noop.envelope(), [])
    with pytest.raises(BatchError):
        prepare_bundle(big)

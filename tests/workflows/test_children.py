"""Child workflows: atomic bundles with cross-workflow cycle checks; a completed child
releases the parent's downstream work, a failed child fails the parent."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import override_settings

from headgate_django import IdConflictError, enqueue, store, testing
from headgate_django.envelope import decode_call
from headgate_django.exceptions import BatchError, CycleError, GraphError
from headgate_django.models import Job
from headgate_django.workflows import (
    Workflow,
    cancel_workflow,
    emit_signal,
    inspect_workflow,
    prepare_bundle,
)
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


@pytest.mark.django_db(transaction=True)
def test_a_finishing_child_wakes_its_waiting_link_at_once():
    """The link does not wait out its poll: the child's end makes it available in the same
    commit, so the parent finishes without treating any scheduled job as due."""
    child = Workflow("billing:7").add_signal("paid", "paid")
    parent = (
        Workflow("checkout:7")
        .add_child("billing", "billing:7")
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    testing.run_jobs()
    # The link has looked at its unfinished child and is waiting for its next poll.
    assert job_state("checkout:7:billing") == "scheduled"
    assert coordinator("billing:7").state == "scheduled"

    emit_signal("billing:7", "paid")
    testing.run_jobs()  # due jobs only: no waiting job is treated as due
    assert coordinator("billing:7").state == "completed"
    assert job_state("checkout:7:billing") == "completed"
    assert coordinator("checkout:7").state == "completed"
    assert node_states("checkout:7") == {"billing": "completed", "receipt": "completed"}


@pytest.mark.django_db(transaction=True)
def test_without_event_wakes_the_link_polls(settings):
    settings.HEADGATE = {"WORKFLOW_EVENT_WAKE": False}
    child = Workflow("billing:8").add_signal("paid", "paid")
    parent = Workflow("checkout:8").add_child("billing", "billing:8")
    enqueue(prepare_bundle([parent, child]))
    testing.run_jobs()
    emit_signal("billing:8", "paid")
    testing.run_jobs()  # the signal node; its coordinator is not woken either
    # Its poll comes round (the generic promote verb refuses a coordinator).
    Job.objects.filter(pk="billing:8:coordinator").update(state="available")
    testing.run_jobs()
    assert coordinator("billing:8").state == "completed"
    assert job_state("checkout:8:billing") == "scheduled"  # until its poll comes round
    run()
    assert coordinator("checkout:8").state == "completed"


def test_a_bundle_tells_each_child_which_links_wait_for_it():
    first = Workflow("a:1").add_child("x", "c:1")
    second = Workflow("b:1").add_child("y", "c:1").add_child("z", "d:1")
    bundle = prepare_bundle(
        [first, second, Workflow("c:1").add_signal("s", "s"), Workflow("d:1").add_signal("s", "s")]
    )
    waiters = {
        p.workflow_id: decode_call(p.envelopes[0].payload)[1]["options"].get("waiters")
        for p in bundle.workflows
    }
    assert waiters == {"a:1": None, "b:1": None, "c:1": ["a:1:x", "b:1:y"], "d:1": ["b:1:z"]}


@pytest.mark.django_db
def test_a_link_still_sees_a_succeeded_child_after_its_rows_were_evicted():
    # The child finishes at once; the parent only starts watching it after a signal,
    # by which time the child's rows (coordinator included) have passed their retention.
    child = (
        Workflow("billing:ev")
        .retention(timedelta(milliseconds=1))
        .add("charge", tasks.record_run.envelope(label="charge"), [])
    )
    parent = (
        Workflow("checkout:ev")
        .add_signal("go", "go", [])
        .add_child("billing", "billing:ev", ["go"])
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    run()
    assert inspect_workflow("billing:ev").coordinator_state == "completed"
    time.sleep(0.01)
    store.job_evict_retained()
    assert job_state("billing:ev:coordinator") is None

    emit_signal("checkout:ev", "go")
    run()
    assert node_states("checkout:ev") == {
        "go": "completed",
        "billing": "completed",
        "receipt": "completed",
    }


@pytest.mark.django_db
@override_settings(HEADGATE={"COORDINATOR_POLL": timedelta(hours=1)})
def test_cancelling_a_child_workflow_wakes_its_waiting_link_at_once():
    child = Workflow("billing:cx").add_signal("paid", "paid", [])
    parent = (
        Workflow("checkout:cx")
        .add_child("billing", "billing:cx", [])
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    testing.run_jobs()  # the link runs, finds the child running, snoozes for the poll
    assert job("checkout:cx:billing").state == "scheduled"

    cancel_workflow("billing:cx")
    assert job("checkout:cx:billing").state == "available"  # woken, not left for an hour
    testing.run_jobs()
    assert node_states("checkout:cx") == {"billing": "archived", "receipt": "missing"}


@pytest.mark.django_db
@pytest.mark.parametrize("length", [2, 3])
def test_workflows_linking_each_other_one_by_one_fail_instead_of_waiting_for_ever(length):
    """A bundle refuses such links at once; workflows enqueued one by one are only linked
    in a cycle once their links all wait, which a waiting link sees and fails on."""
    ids = [f"ring-{i}" for i in range(length)]
    for i, w in enumerate(ids):
        enqueue(
            Workflow(w)
            .add("work", tasks.noop.envelope(), [])
            .add_child("next", ids[(i + 1) % length], ["work"])
            .prepare()
        )
    run(max_jobs=500)
    assert {coordinator(w).state for w in ids} == {"archived"}
    errors = [last_error(f"{w}:next") for w in ids]
    found = [e for e in errors if "cycle" in e]
    assert found, errors
    assert "none of these workflows can finish" in found[0]
    first = found[0].split("cycle, ")[1].split(":")[0].split(" -> ")
    assert len(first) == length + 1 and first[0] == first[-1] and set(first) == set(ids)
    # Each other link then saw its child fail.
    assert all("cycle" in e or "is archived" in e for e in errors)


@pytest.mark.django_db
def test_a_link_waiting_on_a_child_that_waits_on_another_workflow_keeps_waiting():
    """Chains of waiting links that do not come back are not cycles."""
    enqueue(Workflow("top").add_child("mid", "middle").prepare())
    enqueue(Workflow("middle").add_child("bottom", "bottom").prepare())
    enqueue(Workflow("bottom").add_signal("go", "go").prepare())
    run(max_jobs=200)
    assert job_state("top:mid") == "scheduled"
    assert job_state("middle:bottom") == "scheduled"
    emit_signal("bottom", "go")
    run()
    assert {coordinator(w).state for w in ("top", "middle", "bottom")} == {"completed"}

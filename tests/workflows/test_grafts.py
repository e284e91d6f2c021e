"""Grafts: ordinary tasks added to a running workflow at an expected revision. The
deterministic receipt makes concurrent writers collide; the coordinator validates the
combined graph, checkpoints it and only then releases the receipt."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connections

from headgate_django import IdConflictError, NotFoundError, enqueue, store, testing
from headgate_django.envelope import decode_call, encode_call, internal
from headgate_django.exceptions import (
    CycleError,
    DuplicateNodeError,
    GraphError,
    InternalKindError,
    InvalidTransitionError,
    RevisionConflictError,
    UnknownDependencyError,
)
from headgate_django.models import Graft, Job
from headgate_django.store import workflows as workflow_store
from headgate_django.workflows import (
    SignalEmission,
    Workflow,
    WorkflowGraft,
    emit_signal_with,
    inspect_workflow,
    submit_graft,
    workflow_events,
)
from tests.app import tasks
from tests.workflows.helpers import (
    checkpoint,
    coordinator,
    event_names,
    job_state,
    node_states,
    run,
    runs,
)


def onboarding() -> Workflow:
    """create-account → send-welcome, held open by a ``done`` signal nobody has sent yet."""
    return (
        Workflow("onboarding:42")
        .add("create-account", tasks.record_run.envelope(label="create-account"), [])
        .add("send-welcome", tasks.record_run.envelope(label="send-welcome"), ["create-account"])
        .add_signal("hold", "done", ["create-account"])
    )


def started() -> None:
    enqueue(onboarding().prepare())
    run()
    assert coordinator("onboarding:42").state == "scheduled"


def release() -> None:
    emit_signal_with("onboarding:42", SignalEmission("done", "done"))
    run()


def survey(name: str = "send-survey", deps=("send-welcome",), label: str = "survey"):
    return (
        WorkflowGraft("onboarding:42", 1)
        .queue("workflows")
        .add(name, tasks.record_run.envelope(label=label), list(deps))
    )


@pytest.mark.django_db
def test_the_seed_graft_is_checkpointed_before_its_receipt_is_released():
    started()
    graft = survey().prepare()
    assert graft.receipt_job_id == "onboarding:42:graft:2"
    assert graft.revision == 2
    enqueue(graft)
    assert job_state("onboarding:42:graft:2") == "pending"
    assert job_state("onboarding:42:send-survey") == "pending"

    testing.run_jobs(queues=["headgate-workflow"], include_scheduled=True)
    # One transaction: the new revision and node are checkpointed with the receipt's release.
    row = checkpoint("onboarding:42")
    assert row.revision == 2
    assert [n["name"] for n in row.grafts] == ["send-survey"]
    assert job_state("onboarding:42:graft:2") == "available"

    release()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.coordinator_state == "completed"
    assert snapshot.revision == 2
    assert snapshot.node("send-survey").state == "completed"
    assert snapshot.dependents("send-welcome") == ["send-survey"]
    assert job_state("onboarding:42:graft:2") == "completed"
    assert runs("onboarding:42:send-survey")[0].id > runs("onboarding:42:send-welcome")[-1].id
    accepted = [
        e for e in workflow_events("onboarding:42") if e["event"] == "workflow_graft_accepted"
    ]
    assert [(e["revision"], e["nodes"]) for e in accepted] == [(2, ["send-survey"])]
    audit = Graft.objects.get(receipt_job_id="onboarding:42:graft:2")
    assert (audit.status, audit.revision) == ("accepted", 2)


@pytest.mark.django_db
def test_two_grafts_on_one_revision_collide_and_exactly_one_is_accepted():
    started()
    enqueue(survey().prepare())
    with pytest.raises(IdConflictError):
        enqueue(survey("send-gift", label="gift").prepare())
    assert job_state("onboarding:42:send-gift") is None  # the losing batch left nothing
    release()
    assert checkpoint("onboarding:42").revision == 2
    assert [n.name for n in inspect_workflow("onboarding:42").nodes][-1] == "send-survey"
    # The next writer must graft onto revision 2.
    assert survey("send-gift").prepare().receipt_job_id == "onboarding:42:graft:2"


@pytest.mark.django_db(transaction=True)
def test_concurrent_graft_writers_exactly_one_wins():
    started()
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def write(name: str) -> None:
        graft = survey(name, label=name).prepare()
        barrier.wait()
        try:
            outcomes[name] = submit_graft(graft)
        except Exception as exc:  # recorded for the assertions below
            outcomes[name] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(n,)) for n in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [n for n, o in outcomes.items() if o == "onboarding:42:graft:2"]
    losers = [o for o in outcomes.values() if isinstance(o, IdConflictError)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    (loser,) = {"left", "right"} - set(winners)
    assert job_state(f"onboarding:42:{loser}") is None
    release()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.revision == 2
    assert snapshot.node(winners[0]).state == "completed"
    assert snapshot.node(loser) is None


def cycle_graft(expected_revision: int = 1) -> WorkflowGraft:
    return (
        WorkflowGraft("onboarding:42", expected_revision)
        .add("x", tasks.record_run.envelope(label="x"), ["y"])
        .add("y", tasks.record_run.envelope(label="y"), ["x"])
    )


def assert_nothing_written(*job_ids: str) -> None:
    for job_id in ("onboarding:42:graft:2", *job_ids):
        assert job_state(job_id) is None, job_id
    assert not Graft.objects.exists()
    assert inspect_workflow("onboarding:42").revision == 1


@pytest.mark.django_db
def test_a_graft_that_adds_a_cycle_is_refused_at_submission_naming_the_cycle():
    started()
    with pytest.raises(CycleError) as refused:
        enqueue(cycle_graft().prepare())
    assert sorted(set(refused.value.details["cycle"])) == ["x", "y"]
    assert "x -> y" in str(refused.value) or "y -> x" in str(refused.value)
    assert_nothing_written("onboarding:42:x", "onboarding:42:y")
    release()
    assert inspect_workflow("onboarding:42").coordinator_state == "completed"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("node", "error"),
    [
        (("send-welcome", "onboarding:42:other-id", ["create-account"]), DuplicateNodeError),
        (("new", "onboarding:42:new", ["ghost"]), UnknownDependencyError),
    ],
    ids=["replace an accepted node", "unknown dependency"],
)
def test_a_graft_that_changes_accepted_nodes_or_dangles_is_refused_at_submission(node, error):
    started()
    name, job_id, deps = node
    envelope = replace(tasks.record_run.envelope(label="grafted"), id=job_id)
    with pytest.raises(error):
        submit_graft(WorkflowGraft("onboarding:42", 1).add(name, envelope, deps).prepare())
    assert_nothing_written(job_id)
    assert runs(job_id) == []


@pytest.mark.django_db
def test_a_graft_at_another_revision_is_refused_at_submission():
    started()
    with pytest.raises(RevisionConflictError) as refused:
        enqueue(
            WorkflowGraft("onboarding:42", 5)
            .add("late", tasks.record_run.envelope(label="late"), [])
            .prepare()
        )
    assert refused.value.details["current_revision"] == 1
    assert job_state("onboarding:42:graft:6") is None and job_state("onboarding:42:late") is None


@pytest.mark.django_db
def test_a_graft_the_coordinator_refuses_is_removed_and_recorded_as_an_event():
    """A receipt written around submit_graft's checks (a forged one, or one that raced a
    change of the workflow) is refused by the coordinator, which says so in the history."""
    started()
    store.job_insert_many(cycle_graft().prepare().envelopes)
    release()
    assert job_state("onboarding:42:graft:2") is None
    assert job_state("onboarding:42:x") is None and job_state("onboarding:42:y") is None
    audit = Graft.objects.get(receipt_job_id="onboarding:42:graft:2")
    assert audit.status == "rejected" and "cycle" in audit.reason
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.coordinator_state == "completed"
    assert snapshot.revision == 1
    names = event_names("onboarding:42")
    assert "workflow_graft_accepted" not in names
    (rejected,) = [
        e for e in workflow_events("onboarding:42") if e["event"] == "workflow_graft_rejected"
    ]
    assert rejected["receipt_job_id"] == "onboarding:42:graft:2"
    assert rejected["nodes"] == ["x", "y"]
    assert "cycle" in rejected["reason"] and rejected["revision"] == 1


@pytest.mark.django_db
def test_only_ordinary_tasks_can_be_grafted():
    started()
    with pytest.raises(GraphError):
        WorkflowGraft("onboarding:42", 1).add("approval", "approved", ["send-welcome"])
    assert not hasattr(WorkflowGraft, "add_signal")
    # A receipt forged to carry a signal node cannot be enqueued by hand...
    graft = survey().prepare()
    _, kwargs = decode_call(graft.envelopes[0].payload)
    kwargs["nodes"][0].update(kind="signal", signal="approved", job_kind="headgate:signal")
    forged = replace(graft.envelopes[0], payload=encode_call((), kwargs))
    with pytest.raises(InternalKindError):
        enqueue([forged, *graft.envelopes[1:]])
    assert job_state("onboarding:42:graft:2") is None
    # ...and one written past the library (an older version, the database) is rejected by
    # the coordinator.
    enqueue([internal(forged), *graft.envelopes[1:]])
    release()
    audit = Graft.objects.get(receipt_job_id="onboarding:42:graft:2")
    assert audit.status == "rejected"
    assert "only task nodes can be grafted" in audit.reason
    assert job_state("onboarding:42:send-survey") is None
    assert inspect_workflow("onboarding:42").revision == 1


@pytest.mark.django_db
@pytest.mark.parametrize("outcome", ["completed", "archived", "cancelled"])
def test_a_terminal_workflow_refuses_grafts(outcome):
    enqueue(
        Workflow("done")
        .add("a", tasks.echo.envelope() if outcome != "archived" else _failing(), [])
        .prepare()
    )
    if outcome == "cancelled":
        from headgate_django.workflows import cancel_workflow

        cancel_workflow("done")
    run()
    assert coordinator("done").state == outcome
    graft = WorkflowGraft("done", 1).add("late", tasks.echo.envelope(), ["a"]).prepare()
    with pytest.raises(InvalidTransitionError):
        submit_graft(graft)
    assert job_state("done:graft:2") is None and job_state("done:late") is None
    with pytest.raises(NotFoundError):
        submit_graft(WorkflowGraft("nope", 1).add("x", tasks.echo.envelope(), []).prepare())


def _failing():
    return replace(tasks.always_fail.envelope(), max_attempts=1)


@pytest.mark.django_db
def test_a_crash_between_checkpoint_and_release_replays_the_same_receipt(monkeypatch):
    started()
    enqueue(survey().prepare())
    promote = workflow_store._promote
    crashes = []

    def crash_once(cursor, conn, job_ids):
        promote(cursor, conn, job_ids)
        if "onboarding:42:graft:2" in job_ids and not crashes:
            crashes.append(job_ids)
            raise RuntimeError("the worker died before the commit")

    monkeypatch.setattr(workflow_store, "_promote", crash_once)
    report = run()
    assert crashes and "retried" in report.counts
    release()
    assert checkpoint("onboarding:42").revision == 2
    assert [n["name"] for n in checkpoint("onboarding:42").grafts] == ["send-survey"]
    assert event_names("onboarding:42").count("workflow_graft_accepted") == 1
    assert inspect_workflow("onboarding:42").node("send-survey").state == "completed"


@pytest.mark.django_db
def test_successive_grafts_advance_the_revision():
    started()
    enqueue(survey().prepare())
    testing.run_jobs(queues=["headgate-workflow"], include_scheduled=True)
    enqueue(
        WorkflowGraft("onboarding:42", 2)
        .add("follow-up", tasks.record_run.envelope(label="f"), ["send-survey"])
        .prepare()
    )
    release()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.revision == 3
    assert snapshot.node("follow-up").state == "completed"
    assert snapshot.node("follow-up").dependencies == ("send-survey",)
    assert Job.objects.filter(pk__startswith="onboarding:42:graft:").count() == 2


def _awaiting_automatic_retry() -> None:
    """A workflow whose node failed and whose automatic retry is due in an hour: its
    coordinator is snoozing (live), its checkpoint says failed."""
    flaky = replace(tasks.fail_times.envelope(times=1), max_attempts=1)
    enqueue(
        Workflow("auto").automatic_retry(2, timedelta(hours=1)).add("flaky", flaky, []).prepare()
    )
    testing.run_jobs()
    assert coordinator("auto").state == "scheduled"
    assert event_names("auto")[-1] == "automatic_retry_scheduled"


def _late_graft() -> WorkflowGraft:
    return WorkflowGraft("auto", 1).add("late", tasks.record_run.envelope(label="late"), [])


@pytest.mark.django_db
def test_a_failed_workflow_refuses_grafts_at_submission():
    _awaiting_automatic_retry()
    with pytest.raises(InvalidTransitionError, match="has failed"):
        submit_graft(_late_graft().prepare())
    assert job_state("auto:graft:2") is None and job_state("auto:late") is None


@pytest.mark.django_db
def test_a_graft_that_loses_its_revision_to_a_retry_is_removed_and_recorded():
    """The retry takes the revision the receipt waited for: the receipt and its task go,
    with an event and an audit row (before, the task stayed pending for ever)."""
    _awaiting_automatic_retry()
    store.job_insert_many(_late_graft().prepare().envelopes)  # around submit_graft's checks
    run()
    assert inspect_workflow("auto").coordinator_state == "completed"
    assert job_state("auto:graft:2") is None and job_state("auto:late") is None
    (rejected,) = [e for e in workflow_events("auto") if e["event"] == "workflow_graft_rejected"]
    assert (rejected["receipt_job_id"], rejected["nodes"]) == ("auto:graft:2", ["late"])
    assert "retry took revision 2" in rejected["reason"]
    audit = Graft.objects.get(receipt_job_id="auto:graft:2")
    assert (audit.status, audit.revision) == ("rejected", 2)


@pytest.mark.django_db(transaction=True)
def test_a_graft_receipt_runs_on_the_workflows_coordinator_queue_by_default():
    # Workers serve the coordinator's queue and the tasks' queue, not the default
    # workflow queue: the receipt must not be left available where nobody claims it.
    served = ["workflows", "default"]
    enqueue(
        Workflow("q:1")
        .coordinator_queue("workflows")
        .add("a", tasks.record_run.envelope(label="a"), [])
        .add_signal("s", "go", ["a"])
        .prepare()
    )
    testing.run_jobs(queues=served)
    receipt_id = submit_graft(
        WorkflowGraft("q:1", 1).add("b", tasks.record_run.envelope(label="b"), ["a"]).prepare()
    )
    assert Job.objects.get(pk=receipt_id).queue == "workflows"
    testing.run_jobs(queues=served)
    assert Job.objects.get(pk=receipt_id).state == "completed"
    assert inspect_workflow("q:1").node("b").state == "completed"


@pytest.mark.django_db(transaction=True)
def test_an_explicit_graft_queue_is_kept():
    enqueue(Workflow("q:2").coordinator_queue("workflows").add_signal("s", "go").prepare())
    graft = WorkflowGraft("q:2", 1).queue("receipts").add("b", tasks.noop.envelope()).prepare()
    assert Job.objects.get(pk=submit_graft(graft)).queue == "receipts"


@pytest.mark.django_db(transaction=True)
def test_grafted_tasks_keep_at_least_the_workflows_own_retention():
    enqueue(Workflow("r:1").retention(timedelta(days=30)).add_signal("s", "go").prepare())
    graft = WorkflowGraft("r:1", 1).add("b", tasks.noop.envelope()).prepare()
    receipt_id = submit_graft(graft)
    assert Job.objects.get(pk="r:1:b").retention >= timedelta(days=30)
    assert Job.objects.get(pk=receipt_id).retention >= timedelta(days=30)


@pytest.mark.django_db(transaction=True)
def test_a_graft_submitted_while_the_coordinator_decides_to_finish_is_not_orphaned(monkeypatch):
    # The coordinator has read every node as completed and is about to record success
    # when a graft is submitted (the workflow is still running, so submission accepts
    # it). The graft must still be decided, not left pending in a finished workflow.
    from headgate_django.workflows import coordinator as coordinator_module

    enqueue(
        Workflow("race:1")
        .add("a", tasks.record_run.envelope(label="a"), [])
        .add("b", tasks.record_run.envelope(label="b"), ["a"])
        .prepare()
    )
    save = coordinator_module.workflow_tick_save
    submitted: list[str] = []

    def graft_just_before_the_save(ref, *, plan, **kwargs):
        if plan.outcome.value == "succeeded" and not submitted:
            graft = WorkflowGraft("race:1", 1).add("c", tasks.record_run.envelope(label="c"))
            submitted.append(submit_graft(graft.prepare()))
        return save(ref, plan=plan, **kwargs)

    monkeypatch.setattr(coordinator_module, "workflow_tick_save", graft_just_before_the_save)
    run()
    assert submitted == ["race:1:graft:2"]
    assert job_state("race:1:graft:2") != "pending"  # decided, not orphaned
    assert node_states("race:1") == {"a": "completed", "b": "completed", "c": "completed"}
    assert coordinator("race:1").state == "completed"
    assert [r.label for r in runs("race:1:c")] == ["c"]


@pytest.mark.django_db(transaction=True)
def test_a_graft_submitted_after_success_is_recorded_is_refused(monkeypatch):
    # Between the tick that records success and the commit that completes the
    # coordinator's job, the workflow has finished: a graft must be refused, not queued.
    from headgate_django.workflows import coordinator as coordinator_module

    enqueue(Workflow("race:2").add("a", tasks.record_run.envelope(label="a"), []).prepare())
    save = coordinator_module.workflow_tick_save
    refused: list[Exception] = []

    def graft_just_after_the_save(ref, *, plan, **kwargs):
        saved = save(ref, plan=plan, **kwargs)
        if plan.outcome.value == "succeeded" and not refused:
            graft = WorkflowGraft("race:2", 1).add("c", tasks.record_run.envelope(label="c"))
            with pytest.raises(InvalidTransitionError, match="has succeeded") as caught:
                submit_graft(graft.prepare())
            refused.append(caught.value)
        return saved

    monkeypatch.setattr(coordinator_module, "workflow_tick_save", graft_just_after_the_save)
    run()
    assert refused
    assert job_state("race:2:graft:2") is None and job_state("race:2:c") is None
    assert coordinator("race:2").state == "completed"

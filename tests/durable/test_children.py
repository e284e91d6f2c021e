"""Child executions through the database: start, result, failure with its cause, the
close policies, cancellation from parent to children, and bad input that starts nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest.mock import ANY

import pytest
from django.db.models.functions import Now

from headgate_django import durable
from headgate_django.kernel.names import writing_ticks
from headgate_django.models import Execution, Job
from tests.durable.helpers import (
    REFUSED,
    counts,
    drive,
    history,
    refusing_changes,
    replay_until_suspended,
    start,
    task_job,
    types,
    view,
)

pytestmark = pytest.mark.django_db


@durable.operation("kid-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("kid-double", version="1")
def double(ctx: durable.Context, n: int) -> int:
    return 2 * ctx.execute_operation("kid-echo", "1", n).result()


@durable.workflow("kid-boom", version="1")
def boom(ctx: durable.Context, why: str) -> None:
    raise RuntimeError(why)


@durable.workflow("kid-wait", version="1")
def wait(ctx: durable.Context, _: Any) -> Any:
    stop = ctx.wait_signal("stop")
    cancel = ctx.wait_signal(durable.CANCEL_REQUESTED)
    index = ctx.select(stop, cancel, ctx.sleep(timedelta(hours=1)))
    return ["stop", "cancel-requested", "slept"][index]


@durable.workflow("kid-parent", version="1")
def parent(ctx: durable.Context, ns: list[int]) -> Any:
    handles = [ctx.start_child("kid-double", n, version="1") for n in ns]
    return [h.result() for h in handles]


@durable.workflow("kid-catches", version="1")
def catches(ctx: durable.Context, why: str) -> Any:
    handle = ctx.start_child("kid-boom", why, version="1")
    try:
        handle.result()
    except durable.ChildFailedError as failure:
        return {"child_id": failure.child_id, "reason": failure.reason, "state": failure.state}
    return "unreachable"


@durable.workflow("kid-uncaught", version="1")
def uncaught(ctx: durable.Context, why: str) -> Any:
    return ctx.child("kid-boom", why, version="1")


@durable.workflow("kid-holder", version="1")
def holder(ctx: durable.Context, policies: list[str]) -> Any:
    for policy in policies:
        ctx.start_child("kid-wait", None, version="1", parent_close_policy=policy)
    ctx.wait_signal("done").result()
    return "done"


@durable.workflow("kid-waits-for-one", version="1")
def waits_for_one(ctx: durable.Context, _: Any) -> Any:
    return ctx.child("kid-wait", None, version="1")


@durable.workflow("kid-keyed", version="1")
def keyed(ctx: durable.Context, key: str) -> Any:
    return ctx.child("kid-double", 5, version="1", key=key)


@durable.workflow("kid-bad-start", version="1")
def bad_start(ctx: durable.Context, args: dict[str, Any]) -> Any:
    inputs = {"none": None, "nan": {"x": float("nan")}, "big": "x" * 2000}
    try:
        ctx.start_child(
            args["workflow"], inputs[args["input"]], version=args["version"], key=args.get("key")
        )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "started"


def children(parent_id: str) -> list[Execution]:
    return list(Execution.objects.filter(parent_id=parent_id).order_by("created_at", "id"))


def test_a_parent_waits_for_its_children_and_gets_their_results() -> None:
    wf = start("kid-parent", [1, 2])
    drive()
    assert view(wf).state == "succeeded"
    assert view(wf).result == [2, 4]
    kids = children(wf)
    assert [k.id for k in kids] == [f"{wf}:child:1", f"{wf}:child:2"]
    assert [(k.name, k.version, k.state, k.parent_command_id) for k in kids] == [
        ("kid-double", "1", "succeeded", "child:1"),
        ("kid-double", "1", "succeeded", "child:2"),
    ]
    events = history(wf)
    started = [p for t, p in events if t == "ChildStarted"]
    assert started[0] == {
        "command_id": "child:1",
        "name": "kid-double",
        "version": "1",
        "input": 1,
        "child_id": f"{wf}:child:1",
        "parent_close_policy": "terminate",
    }
    done = [p for t, p in events if t == "ChildCompleted"]
    assert sorted((p["command_id"], p["result"]) for p in done) == [("child:1", 2), ("child:2", 4)]
    assert types(wf)[-1] == "WorkflowCompleted"


def test_the_views_name_the_parent_and_list_the_children() -> None:
    wf = start("kid-parent", [3])
    drive()
    parent_view = view(wf)
    assert parent_view.parent_id is None
    assert [(c.id, c.state, c.command_id, c.parent_close_policy) for c in parent_view.children] == [
        (f"{wf}:child:1", "succeeded", "child:1", "terminate")
    ]
    child_view = view(f"{wf}:child:1")
    assert child_view.parent_id == wf
    assert child_view.children == ()


def test_a_child_failure_raises_in_the_parent_with_the_cause() -> None:
    wf = start("kid-catches", "out of stock")
    drive()
    assert view(wf).result == {
        "child_id": f"{wf}:child:1",
        "reason": "RuntimeError: out of stock",
        "state": "failed",
    }
    assert view(f"{wf}:child:1").failure_reason == "RuntimeError: out of stock"


def test_an_uncaught_child_failure_fails_the_parent_naming_the_child() -> None:
    wf = start("kid-uncaught", "no stock")
    drive()
    assert view(wf).state == "failed"
    assert view(wf).failure_reason == (
        f"ChildFailedError: child {wf}:child:1 (workflow kid-boom@1) is failed: "
        "RuntimeError: no stock"
    )


def test_cancelling_a_parent_cancels_its_running_children() -> None:
    wf = start("kid-holder", ["terminate", "terminate"])
    drive()
    kids = children(wf)
    assert [k.state for k in kids] == ["running", "running"]
    durable.Manager().cancel(wf, reason="order withdrawn")
    assert view(wf).state == "cancelled"
    for kid in children(wf):
        assert kid.state == "cancelled"
        assert kid.failure_reason == f"terminated: its parent {wf} is cancelled"
    # The children's ends are not appended to a finished parent.
    assert "ChildFailed" not in types(wf)
    assert drive() == []


def test_close_policies_apply_when_the_parent_completes() -> None:
    wf = start("kid-holder", ["terminate", "abandon", "request_cancel"])
    drive()
    durable.Client().signal(wf, "done")
    drive()
    assert view(wf).state == "succeeded"
    terminated, abandoned, asked = children(wf)
    assert terminated.state == "cancelled"
    assert abandoned.state == "running"
    assert asked.state == "succeeded"
    assert asked.result == "cancel-requested"
    signal = [p for t, p in history(asked.id) if t == "SignalReceived"]
    assert signal == [
        {
            "name": durable.CANCEL_REQUESTED,
            "payload": {"parent_id": wf, "parent_state": "succeeded"},
            "message_id": f"parent-closed:{wf}",
        }
    ]
    durable.Client().signal(abandoned.id, "stop")
    drive()
    assert view(abandoned.id).result == "stop"
    assert "ChildCompleted" not in types(wf)[types(wf).index("WorkflowCompleted") :]


def test_a_cancelled_child_fails_the_parents_wait() -> None:
    wf = start("kid-waits-for-one", None)
    drive()
    kid = f"{wf}:child:1"
    durable.Manager().cancel(kid, reason="not needed")
    drive()
    assert view(wf).state == "failed"
    assert view(wf).failure_reason == (
        f"ChildFailedError: child {kid} (workflow kid-wait@1) is cancelled: not needed"
    )
    assert [p for t, p in history(wf) if t == "ChildFailed"] == [
        {"command_id": "child:1", "child_id": kid, "state": "cancelled", "reason": "not needed"}
    ]


def test_a_key_names_the_child_and_a_taken_key_fails_the_start() -> None:
    wf = start("kid-keyed", "invoice:7")
    drive()
    assert view(wf).result == 10
    assert view("invoice:7").parent_id == wf
    again = start("kid-keyed", "invoice:7")
    drive()
    assert view(again).state == "failed"
    assert view(again).failure_reason == (
        "ChildFailedError: child invoice:7 (workflow kid-double@1) is not_started: workflow id "
        "invoice:7 is already in use by another execution"
    )
    assert Execution.objects.filter(parent_id=again).count() == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            {"workflow": "kid-nope", "version": "1", "input": "none"},
            "DefinitionError: no durable workflow 'kid-nope' version '1' is registered here",
        ),
        (
            {"workflow": "kid-double", "version": "9", "input": "none"},
            "DefinitionError: no durable workflow 'kid-double' version '9' is registered here "
            "(versions: 1)",
        ),
        (
            {"workflow": "kid-double", "version": "1", "input": "nan"},
            "PayloadNotJSONError: payload is not JSON-serialisable",
        ),
        (
            {"workflow": "kid-double", "version": "1", "input": "big"},
            "PayloadTooLargeError: the input of child child:1 (kid-double) is 2002 bytes, over "
            "the 1000-byte limit",
        ),
        (
            # no /durable/executions/{id} route, console page or API call could address it
            {"workflow": "kid-double", "version": "1", "input": "none", "key": "shipment/7"},
            "DefinitionError: a child workflow id may not contain '/': 'shipment/7'",
        ),
        (
            # a schedule would take its tick as fired, and the child would pose as one
            {"workflow": "kid-double", "version": "1", "input": "none", "key": "sched:dur:0"},
            "ReservedIdError: child key 'sched:dur:0' starts with 'sched:', which is reserved",
        ),
    ],
)
def test_a_bad_child_start_raises_at_start_child_and_starts_nothing(
    args: dict[str, Any], error: str, settings: Any
) -> None:
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    wf = start("kid-bad-start", args)
    before = counts()
    drive()
    assert view(wf).state == "succeeded"
    assert str(view(wf).result).startswith(error)
    assert "ChildStarted" not in types(wf)
    assert counts()[0] == before[0]  # no execution was added


def test_a_parent_a_schedule_started_still_starts_children_under_its_id() -> None:
    """Only a ``key`` is the caller's choice: the derived ids of a tick's execution keep its
    ``sched:`` id, as the ids of a tick's workflow nodes do."""
    with writing_ticks(["sched:nightly:0"]):  # as the scheduler starts a durable tick
        wf = start("kid-parent", [1], workflow_id="sched:nightly:0")
    drive()
    assert (view(wf).state, view(wf).result) == ("succeeded", [2])
    assert [k.id for k in children(wf)] == ["sched:nightly:0:child:1"]


def test_a_changed_child_workflow_on_replay_is_nondeterminism(swap_code: Any) -> None:
    wf = start("kid-waits-for-one", None)
    drive()

    def renamed(ctx: durable.Context, _: Any) -> Any:
        return ctx.child("kid-double", 1, version="1")

    swap_code(
        "workflow", "kid-waits-for-one", "1", durable.WorkflowDef(renamed, "kid-waits-for-one", "1")
    )
    export = durable.Manager().history(wf)
    with pytest.raises(
        durable.NondeterminismError, match="the code starts child workflow 'kid-double'"
    ):
        durable.replay(export, workflows=[durable.WorkflowDef(renamed, "kid-waits-for-one", "1")])


@durable.workflow("kid-grandparent", version="1")
def grandparent(ctx: durable.Context, _: Any) -> Any:
    return ctx.child("kid-holder", ["terminate"], version="1")


def test_cancelling_a_grandparent_cancels_the_whole_line() -> None:
    wf = start("kid-grandparent", None)
    drive()
    kid = f"{wf}:child:1"
    grandkid = f"{kid}:child:1"
    assert (view(kid).state, view(grandkid).state) == ("running", "running")
    durable.Manager().cancel(wf)
    assert [view(i).state for i in (wf, kid, grandkid)] == ["cancelled"] * 3
    assert view(grandkid).failure_reason == f"terminated: its parent {kid} is cancelled"


def test_the_reconcile_duty_closes_children_a_finished_parent_left_running() -> None:
    from headgate_django.durable.duties import reconcile
    from headgate_django.store import durable as store

    wf = start("kid-holder", ["terminate", "abandon"])
    drive()
    store.execution_cancel(wf, reason="the worker died before closing its children")
    terminated, abandoned = children(wf)
    assert (terminated.state, abandoned.state) == ("running", "running")
    assert reconcile()["closed"] == 1
    assert [k.state for k in children(wf)] == ["cancelled", "running"]
    assert reconcile()["closed"] == 0


@durable.workflow("kid-same-key-twice", version="1")
def same_key_twice(ctx: durable.Context, _: Any) -> Any:
    first = ctx.start_child("kid-double", 1, version="1", key="twice")
    second = ctx.start_child("kid-double", 2, version="1", key="twice")
    try:
        second.result()
    except durable.ChildFailedError as failure:
        return [first.result(), failure.state, failure.reason]
    return "unreachable"


def test_two_starts_with_one_key_in_one_pass_start_one_child() -> None:
    wf = start("kid-same-key-twice", None)
    drive()
    # The key is held by this run's own child:1, not by "an earlier run".
    assert view(wf).result == [
        2,
        "not_started",
        "workflow id twice is in use by child:1 of this run",
    ]
    assert [k.id for k in children(wf)] == ["twice"]


@durable.workflow("kid-continues", version="1")
def continues(ctx: durable.Context, run: int) -> Any:
    if run == 1:
        ctx.start_child("kid-wait", None, version="1", key="kid-of-run-1")
        ctx.wait_signal("next").result()
        ctx.continue_as_new(2)
    return ctx.wait_signal("done").result()


def test_a_run_that_continued_as_new_closes_its_children_even_if_its_task_died(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from headgate_django.durable import workflow_task

    wf = start("kid-continues", 1)
    drive()
    assert view("kid-of-run-1").state == "running"
    real = workflow_task.close_children

    def dies_after_continuing(parent_id: str, parent_state: str, **kw: Any) -> None:
        if parent_state == "continued_as_new":
            raise RuntimeError("the worker died right after the run continued as new")
        real(parent_id, parent_state, **kw)

    monkeypatch.setattr(workflow_task, "close_children", dies_after_continuing)
    durable.Client().signal(wf, "next")
    drive()
    assert task_job(wf).state == "retryable"
    Job.objects.filter(pk=task_job(wf).pk).update(state="available", scheduled_at=Now())
    drive()
    assert (view(wf).run_number, view(wf).state) == (2, "running")
    # The retried task goes on with run 2, and still gives run 1's child its policy.
    assert view("kid-of-run-1").state == "cancelled"
    assert view("kid-of-run-1").failure_reason == (
        f"terminated: its parent {wf} is continued_as_new"
    )


@pytest.mark.django_db(transaction=True)  # refusing_changes: DDL commits on MariaDB
def test_children_the_end_of_a_run_cannot_close_suspend_the_execution(settings: Any) -> None:
    """The close of an ended run's children comes after the pass: a close failing on every
    attempt was retried on the job table's MAX_ATTEMPTS (25, about 13 hours of backoff),
    then the archived task failed the execution for good."""
    settings.HEADGATE = {
        "DURABLE_TASK_ATTEMPTS": 3,
        "BACKOFF_BASE": timedelta(milliseconds=1),
        "BACKOFF_CAP": timedelta(milliseconds=5),
    }
    wf = start("kid-continues", 1)
    drive()
    with refusing_changes("kid-of-run-1"):
        durable.Client().signal(wf, "next")
        replay_until_suspended(wf)
        reason = view(wf).suspended_reason
        assert reason.startswith("the workflow task failed 3 times: ")
        assert REFUSED in reason
        assert (view(wf).run_number, task_job(wf).state) == (2, "scheduled")
        assert history(wf)[-1] == ("WorkflowSuspended", {"reason": reason, "traceback": ANY})
        assert view("kid-of-run-1").state == "running"
    # The database takes the change again: the resumed task closes run 1's child first.
    durable.Manager().resume(wf)
    drive()
    assert (view(wf).state, view("kid-of-run-1").state) == ("running", "cancelled")
    assert view("kid-of-run-1").failure_reason == (
        f"terminated: its parent {wf} is continued_as_new"
    )
    durable.Client().signal(wf, "done", "ok")
    drive()
    assert (view(wf).state, view(wf).result) == ("succeeded", "ok")


def _two_orphaning_parents() -> tuple[str, str]:
    """Two parents, each with a running ``terminate`` child, ended without closing it (as
    by a worker that died between the end and the close): the reconcile duty's work."""
    from headgate_django.store import durable as store

    parents = tuple(
        durable.Client().start("kid-holder", "1", ["terminate"], workflow_id=wf).workflow_id
        for wf in ("orphans-a", "orphans-b")
    )
    drive()
    for wf in parents:
        store.execution_cancel(wf, reason="the worker died before closing its children")
    stuck, other = parents
    return stuck, other


@pytest.mark.django_db(transaction=True)  # refusing_changes: DDL commits on MariaDB
def test_a_parent_whose_children_cannot_be_closed_does_not_hold_up_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from headgate_django.durable.duties import reconcile

    stuck, other = _two_orphaning_parents()
    with refusing_changes(f"{stuck}:child:1"), caplog.at_level("ERROR"):
        assert reconcile()["closed"] == 1
        assert (view(f"{stuck}:child:1").state, view(f"{other}:child:1").state) == (
            "running",
            "cancelled",
        )
    failed = [r for r in caplog.records if "closing the children" in r.getMessage()]
    assert [r.execution_id for r in failed] == [stuck]  # type: ignore[attr-defined]
    assert REFUSED in failed[0].getMessage()
    # Nothing stored was lost: the store takes the change again and the next run closes it.
    assert reconcile()["closed"] == 1
    assert view(f"{stuck}:child:1").state == "cancelled"
    assert reconcile()["closed"] == 0


def _closes_failing(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The children whose close was logged as failed."""
    return [
        r.child_id  # type: ignore[attr-defined]
        for r in caplog.records
        if "could not close its child" in r.getMessage()
    ]


@pytest.mark.django_db(transaction=True)  # refusing_changes: DDL commits on MariaDB
def test_a_child_that_cannot_be_closed_holds_up_none_of_its_siblings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The end of the parent's run closes each child on its own: the second child's close
    failing kept the third from its close, until the task's retry reached it."""
    wf = start("kid-holder", ["terminate"] * 3)
    drive()
    first, second, third = (f"{wf}:child:{n}" for n in (1, 2, 3))
    with refusing_changes(second), caplog.at_level("ERROR"):
        durable.Client().signal(wf, "done")
        drive()
        assert view(wf).state == "succeeded"
        assert [view(k).state for k in (first, second, third)] == [
            "cancelled",
            "running",
            "cancelled",
        ]
        assert task_job(wf).state == "retryable"  # the close is not done: tried again
        assert REFUSED in task_job(wf).errors[-1]["error"]
    assert _closes_failing(caplog) == [second]
    Job.objects.filter(pk=task_job(wf).pk).update(state="available", scheduled_at=Now())
    drive()
    assert view(second).state == "cancelled"
    assert view(second).failure_reason == f"terminated: its parent {wf} is succeeded"


@pytest.mark.django_db(transaction=True)  # refusing_changes: DDL commits on MariaDB
def test_the_reconcile_duty_closes_the_siblings_of_a_child_it_cannot_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from headgate_django.durable.duties import reconcile
    from headgate_django.store import durable as store

    wf = start("kid-holder", ["terminate"] * 3)
    drive()
    store.execution_cancel(wf, reason="the worker died before closing its children")
    first, second, third = (f"{wf}:child:{n}" for n in (1, 2, 3))
    with refusing_changes(second), caplog.at_level("ERROR"):
        assert reconcile()["closed"] == 0  # the parent is not done: the next run tries again
        assert [view(k).state for k in (first, second, third)] == [
            "cancelled",
            "running",
            "cancelled",
        ]
    assert _closes_failing(caplog) == [second]
    assert reconcile()["closed"] == 1
    assert view(second).state == "cancelled"
    assert reconcile()["closed"] == 0


@pytest.mark.django_db(transaction=True)  # refusing_changes: DDL commits on MariaDB
def test_parents_that_keep_failing_do_not_keep_the_duty_from_the_parents_after_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each run reads one slice of parents, by id, and the next starts after it: a run that
    read the same first slice again would let a slice of failing parents block the rest."""
    from headgate_django.durable import duties

    monkeypatch.setattr(duties, "BATCH", 1)
    monkeypatch.setitem(duties._orphans, "after", "")
    stuck, other = _two_orphaning_parents()
    with refusing_changes(f"{stuck}:child:1"):
        # a fails, then b is closed, then the slice after b is empty: the sweep wraps round
        assert [duties.reconcile()["closed"] for _ in range(3)] == [0, 1, 0]
        assert (view(f"{stuck}:child:1").state, view(f"{other}:child:1").state) == (
            "running",
            "cancelled",
        )
    # The next run is back at the first parent, which the store now lets close.
    assert duties.reconcile()["closed"] == 1
    assert view(f"{stuck}:child:1").state == "cancelled"


def test_the_reconcile_duty_asks_a_request_cancel_child_a_finished_parent_left_unasked() -> None:
    from headgate_django.durable.duties import reconcile
    from headgate_django.store import durable as store

    wf = start("kid-holder", ["request_cancel", "abandon"])
    drive()
    store.execution_cancel(wf, reason="the worker died before closing its children")
    asked, abandoned = children(wf)
    assert reconcile()["closed"] == 1
    signal = [p for t, p in history(asked.id) if t == "SignalReceived"]
    assert signal == [
        {
            "name": durable.CANCEL_REQUESTED,
            "payload": {"parent_id": wf, "parent_state": "cancelled"},
            "message_id": f"parent-closed:{wf}",
        }
    ]
    # Asked once: a child still running (its code decides when it ends) is not asked again.
    assert reconcile()["closed"] == 0
    drive()
    assert (view(asked.id).state, view(asked.id).result) == ("succeeded", "cancel-requested")
    assert "SignalReceived" not in types(abandoned.id)
    assert view(abandoned.id).state == "running"

"""Continue-as-new with the other durable features, through the database: child ids per
run, the close policies at the end of a run, updates a run did not handle, queries of the
current run, and signal-with-start into the current run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from headgate_django import durable
from headgate_django.exceptions import RevisionConflictError
from headgate_django.kernel.replay_updates import CONTINUED_FIRST
from headgate_django.models import Execution, RunHistoryEvent
from headgate_django.store.durable_updates import update_accept
from tests.durable.helpers import drive, history, start, types, view

pytestmark = pytest.mark.django_db


@durable.operation("rcu-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("rcu-kid", version="1")
def kid(ctx: durable.Context, n: int) -> Any:
    return ctx.execute_operation("rcu-echo", "1", n).result()


@durable.workflow("rcu-two-runs", version="1")
def two_runs(ctx: durable.Context, state: dict[str, Any]) -> Any:
    """Each run starts one child (``child:1`` in both) and waits for it."""
    got = ctx.child("rcu-kid", len(state["got"]), version="1", key=state.get("key"))
    if not state["got"]:
        ctx.continue_as_new({**state, "got": [got]})
    return [*state["got"], got]


@durable.workflow("rcu-idle-kid", version="1")
def idle_kid(ctx: durable.Context, _: Any) -> Any:
    stop = ctx.wait_signal("stop")
    cancel = ctx.wait_signal(durable.CANCEL_REQUESTED)
    return ["stop", "cancel-requested"][ctx.select(stop, cancel)]


@durable.workflow("rcu-leaves-kids", version="1")
def leaves_kids(ctx: durable.Context, run: int) -> Any:
    """Run 1 starts a child per close policy and continues as new without waiting."""
    if run == 1:
        for policy in ("terminate", "abandon", "request_cancel"):
            ctx.start_child("rcu-idle-kid", None, version="1", parent_close_policy=policy)
        ctx.continue_as_new(2)
    ctx.wait_signal("done").result()
    return "done"


@durable.workflow("rcu-counter", version="1")
def counter(ctx: durable.Context, run: int) -> Any:
    """Run 1 continues as new as soon as "next" arrives; run 2 waits for "stop"."""
    ctx.state["run"] = run
    ctx.state["added"] = []
    ctx.wait_signal("next" if run == 1 else "stop").result()
    if run == 1:
        ctx.continue_as_new(2)
    return ctx.state["added"]


@counter.update("add")
def add(ctx: durable.Context, item: str) -> int:
    ctx.state["added"].append(item)
    return len(ctx.state["added"])


@counter.query("run")
def which_run(ctx: durable.Context) -> Any:
    return {"run": ctx.state["run"], "added": ctx.state["added"], "run_id": ctx.run_id}


@durable.workflow("rcu-inbox", version="1")
def inbox(ctx: durable.Context, run: int) -> Any:
    """Each run takes one "item" signal; run 1 then continues as new."""
    item = ctx.wait_signal("item")
    ctx.select(item, ctx.sleep(timedelta(hours=1)))
    if run == 1:
        ctx.continue_as_new(2)
    return item.result()


def kids(parent_id: str) -> list[Execution]:
    return list(Execution.objects.filter(parent_id=parent_id).order_by("created_at", "id"))


def archived(workflow_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = RunHistoryEvent.objects.filter(run__execution_id=workflow_id).order_by("run", "seq")
    return list(rows.values_list("type", "payload"))


def test_each_run_starts_its_own_child_with_an_id_of_its_own() -> None:
    wf = start("rcu-two-runs", {"got": []})
    drive()
    done = view(wf)
    assert (done.state, done.run_number, done.result) == ("succeeded", 2, [0, 1])
    second_run = done.run_id
    assert second_run != wf
    assert [(k.id, k.state, k.result) for k in kids(wf)] == [
        (f"{wf}:child:1", "succeeded", 0),
        (f"{second_run}:child:1", "succeeded", 1),
    ]
    # Each started once: one ChildStarted per run, one outcome delivered to each run.
    assert [p["child_id"] for t, p in archived(wf) if t == "ChildStarted"] == [f"{wf}:child:1"]
    assert [p["child_id"] for t, p in history(wf) if t == "ChildStarted"] == [
        f"{second_run}:child:1"
    ]
    assert [p["child_id"] for t, p in history(wf) if t == "ChildCompleted"] == [
        f"{second_run}:child:1"
    ]


def test_a_key_an_earlier_run_used_is_refused_to_the_next_run() -> None:
    wf = start("rcu-two-runs", {"got": [], "key": "ship:1"})
    drive()
    done = view(wf)
    assert done.state == "failed"
    assert "ship:1 is in use by an earlier run" in done.failure_reason
    assert [(k.id, k.result) for k in kids(wf)] == [("ship:1", 0)]  # started once
    refused = [p for t, p in history(wf) if t == "ChildFailed"]
    assert [(p["child_id"], p["state"]) for p in refused] == [("ship:1", "not_started")]


def test_the_end_of_a_run_closes_its_children_by_their_policies() -> None:
    wf = start("rcu-leaves-kids", 1)
    drive()
    assert view(wf).run_number == 2
    terminated, abandoned, asked = kids(wf)
    assert terminated.state == "cancelled"
    assert terminated.failure_reason == f"terminated: its parent {wf} is continued_as_new"
    assert abandoned.state == "running"
    assert (asked.state, asked.result) == ("succeeded", "cancel-requested")
    signal = [p for t, p in history(asked.id) if t == "SignalReceived"]
    assert signal[0]["payload"] == {"parent_id": wf, "parent_state": "continued_as_new"}
    # The ended run has nobody to tell: no outcome reaches the current run.
    durable.Client().signal(abandoned.id, "stop")
    drive()
    assert view(abandoned.id).result == "stop"
    assert not {"ChildCompleted", "ChildFailed"} & set(types(wf))
    assert not {"ChildCompleted", "ChildFailed"} & {t for t, _ in archived(wf)}
    durable.Client().signal(wf, "done")
    drive()
    assert (view(wf).state, view(wf).result) == ("succeeded", "done")


def test_an_update_the_run_did_not_handle_fails_and_stays_once_per_execution() -> None:
    wf = start("rcu-counter", 1)
    drive()
    manager = durable.Manager()
    durable.Client().signal(wf, "next")
    # Accepted after the signal the code waits for, before any pass: run 1 continues as
    # new without waiting again, so it never handles it.
    manager.update(wf, "add", "late", update_id="u-late", wait=False)
    drive()
    assert view(wf).run_number == 2
    late = manager.get_update(wf, "u-late")
    assert (late.state, late.error) == ("failed", CONTINUED_FIRST)
    completed = [p for t, p in archived(wf) if t == "UpdateCompleted"]
    assert completed == [{"update_id": "u-late", "error": CONTINUED_FIRST, "handled": False}]
    assert [t for t, _ in archived(wf)][-2:] == ["UpdateCompleted", "WorkflowContinuedAsNew"]
    # The id counts once per execution: the new run does not accept it again.
    again = manager.update(wf, "add", "late", update_id="u-late", wait=False)
    assert (again.state, again.deduplicated) == ("failed", True)
    assert "UpdateAccepted" not in types(wf)
    # A new update goes to the current run; a query reads the current run.
    manager.update(wf, "add", "tea", update_id="u-tea", wait=False)
    drive()
    assert manager.get_update(wf, "u-tea").result == 1
    assert manager.query(wf, "run") == {"run": 2, "added": ["tea"], "run_id": view(wf).run_id}
    durable.Client().signal(wf, "stop")
    drive()
    assert view(wf).result == ["tea"]


def test_signal_with_start_delivers_into_the_current_run() -> None:
    client = durable.Client()
    first = client.signal_with_start(
        "rcu-inbox", "1", 1, "item", "a", business_idempotency_key="inbox:1", message_id="m-a"
    )
    assert first.started
    drive()
    wf = first.workflow_id
    assert view(wf).run_number == 2
    second = client.signal_with_start(
        "rcu-inbox", "1", 1, "item", "b", business_idempotency_key="inbox:1", message_id="m-b"
    )
    assert (second.workflow_id, second.started, second.delivered) == (wf, False, True)
    received = [p for t, p in history(wf) if t == "SignalReceived"]
    assert received == [{"name": "item", "payload": "b", "message_id": "m-b"}]
    # A message id the first run received is still known: not delivered again.
    repeat = client.signal_with_start(
        "rcu-inbox", "1", 1, "item", "a", business_idempotency_key="inbox:1", message_id="m-a"
    )
    assert repeat.delivered is False
    drive()
    assert (view(wf).state, view(wf).result) == ("succeeded", "b")


def test_an_update_is_accepted_only_against_the_run_its_validator_saw() -> None:
    wf = start("rcu-counter", 1)
    drive()
    assert (view(wf).run_id, view(wf).history_length) == (wf, 1)
    durable.Client().signal(wf, "next")
    drive()
    # The new run is at seq 1 too: the seq alone would not tell the runs apart.
    assert view(wf).run_number == 2 and view(wf).history_length == 1
    rows = len(history(wf))
    with pytest.raises(RevisionConflictError):
        update_accept(
            wf, expected_seq=1, expected_run=wf, update_id="u-old", name="add", payload="x"
        )
    assert len(history(wf)) == rows
    accepted = update_accept(
        wf,
        expected_seq=1,
        expected_run=view(wf).run_id,
        update_id="u-new",
        name="add",
        payload="x",
    )
    assert accepted is None and types(wf)[-1] == "UpdateAccepted"

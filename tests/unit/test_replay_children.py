"""Child executions in the pure replay engine: the start command, the child's id, its
outcome as a fact, select over a child, and nondeterminism on a changed child."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django.exceptions import ChildFailedError, HistoryCorruptError
from headgate_django.kernel.replay import MAX_EXECUTION_ID, Context, child_execution_id, replay
from headgate_django.kernel.replay_events import (
    CHILD_COMPLETED,
    CHILD_FAILED,
    CHILD_STARTED,
    WORKFLOW_STARTED,
    Completed,
    Event,
    Failed,
    Nondeterministic,
    Parked,
    StartChild,
    index_history,
)

T0 = 1_800_000_000_000


def history(*events: tuple[str, dict[str, Any]]) -> list[Event]:
    first = Event(1, WORKFLOW_STARTED, {"input": None, "seed": "s"}, T0)
    return [first] + [Event(n, t, p, T0 + n) for n, (t, p) in enumerate(events, start=2)]


def started(cid: str = "child:1", name: str = "ship", version: str = "1") -> tuple[str, Any]:
    command = StartChild(cid, name, version, {"n": 1}, f"wf:{cid}", "terminate")
    return CHILD_STARTED, command.event_payload()


def waits(ctx: Context, _: Any) -> Any:
    return ctx.child("ship", {"n": 1}, version="1")


def test_a_new_child_is_a_start_command_with_a_derived_id() -> None:
    outcome = replay(waits, None, history(), workflow_id="wf")
    assert isinstance(outcome, Parked)
    assert outcome.commands == [
        StartChild("child:1", "ship", "1", {"n": 1}, "wf:child:1", "terminate")
    ]
    assert outcome.waiting_on == ("child:1",)


def test_the_childs_result_and_failure_are_facts() -> None:
    done = (CHILD_COMPLETED, {"command_id": "child:1", "child_id": "wf:child:1", "result": 7})
    outcome = replay(waits, None, history(started(), done), workflow_id="wf")
    assert outcome == Completed(7, [])
    failed = (
        CHILD_FAILED,
        {"command_id": "child:1", "child_id": "wf:child:1", "state": "cancelled", "reason": "r"},
    )
    outcome = replay(waits, None, history(started(), failed), workflow_id="wf")
    assert isinstance(outcome, Failed)
    assert outcome.reason == "ChildFailedError: child wf:child:1 (workflow ship@1) is cancelled: r"


def test_the_failure_carries_the_child_id_reason_and_state() -> None:
    seen: list[ChildFailedError] = []

    def catches(ctx: Context, _: Any) -> Any:
        handle = ctx.start_child("ship", {"n": 1}, version="1")
        error = handle.exception()
        assert isinstance(error, ChildFailedError)
        seen.append(error)
        return handle.child_id

    failed = (
        CHILD_FAILED,
        {"command_id": "child:1", "child_id": "wf:child:1", "state": "failed", "reason": "boom"},
    )
    assert replay(catches, None, history(started(), failed), workflow_id="wf") == Completed(
        "wf:child:1", []
    )
    assert (seen[0].child_id, seen[0].reason, seen[0].state) == ("wf:child:1", "boom", "failed")


def test_a_select_over_a_child_and_a_signal_is_decided_by_the_order_of_facts() -> None:
    def race(ctx: Context, _: Any) -> Any:
        return ctx.select(ctx.start_child("ship", {"n": 1}, version="1"), ctx.wait_signal("stop"))

    done = (CHILD_COMPLETED, {"command_id": "child:1", "child_id": "wf:child:1", "result": 1})
    outcome = replay(race, None, history(started(), done), workflow_id="wf")
    assert isinstance(outcome, Completed) and outcome.result == 0


def test_a_changed_child_name_or_version_is_nondeterminism() -> None:
    for recorded in (started(name="deliver"), started(version="2")):
        outcome = replay(waits, None, history(recorded), workflow_id="wf")
        assert isinstance(outcome, Nondeterministic)
        assert "child:1: the code starts child workflow 'ship' version '1'" in str(outcome.error)


def test_a_recorded_child_the_code_no_longer_starts_is_nondeterminism() -> None:
    outcome = replay(lambda ctx, _: "done", None, history(started()), workflow_id="wf")
    assert isinstance(outcome, Nondeterministic)
    assert "history has child:1 (ChildStarted(name='ship'" in str(outcome.error)


def test_the_check_vets_new_starts_only_and_its_error_raises_in_the_code() -> None:
    def refuse(command: StartChild) -> None:
        raise ValueError(f"no {command.name}")

    outcome = replay(waits, None, history(), workflow_id="wf", check_child=refuse)
    assert outcome == Failed("ValueError: no ship", [])
    outcome = replay(waits, None, history(started()), workflow_id="wf", check_child=refuse)
    assert isinstance(outcome, Parked)  # recorded: never vetted again


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"version": ""}, "workflow version must be a non-empty string"),
        ({"version": "1", "key": ""}, "child key must be a non-empty string"),
        ({"version": "1", "parent_close_policy": "orphan"}, "parent_close_policy must be one of"),
    ],
)
def test_bad_arguments_raise_in_the_code(kwargs: dict[str, Any], error: str) -> None:
    def bad(ctx: Context, _: Any) -> Any:
        return ctx.start_child("ship", None, **kwargs)

    outcome = replay(bad, None, history(), workflow_id="wf")
    assert isinstance(outcome, Failed) and error in outcome.reason and outcome.commands == []


def test_child_ids_are_the_key_or_derived_and_never_over_the_limit() -> None:
    assert child_execution_id("run", "child:3") == "run:child:3"
    assert child_execution_id("run", "child:3", "invoice:9") == "invoice:9"
    long = "r" * MAX_EXECUTION_ID
    derived = child_execution_id(long, "child:12")
    assert len(derived) <= MAX_EXECUTION_ID and derived.endswith(":child:12")
    assert derived == child_execution_id(long, "child:12")
    assert derived != child_execution_id(long[:-1] + "s", "child:12")


def test_a_child_outcome_without_its_start_is_a_corrupt_history() -> None:
    done = (CHILD_COMPLETED, {"command_id": "child:1", "child_id": "x", "result": 1})
    with pytest.raises(HistoryCorruptError, match="child:1 was never scheduled"):
        index_history(history(done))
    bad = (CHILD_STARTED, {"command_id": "child:1", "name": "ship", "version": "1"})
    with pytest.raises(HistoryCorruptError, match="payload lacks 'child_id'"):
        index_history(history(bad))

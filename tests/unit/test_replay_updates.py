"""Queries and updates in the pure replay engine: where updates run, what queries see.

Histories are built by hand in the shape the runtime writes (see the contract in
``headgate_django.kernel.replay`` and ``replay_updates``), then replayed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from headgate_django.kernel.replay import Context, replay
from headgate_django.kernel.replay_events import (
    OPERATION_COMPLETED,
    OPERATION_SCHEDULED,
    SELECT_RESOLVED,
    SIGNAL_RECEIVED,
    UPDATE_ACCEPTED,
    UPDATE_COMPLETED,
    WORKFLOW_COMPLETED,
    WORKFLOW_STARTED,
    Completed,
    CompleteUpdate,
    ContinuedAsNew,
    Event,
    Nondeterministic,
    Parked,
    RecordSelect,
)
from headgate_django.kernel.replay_queries import Answered, Raised, run_query
from headgate_django.kernel.replay_updates import CONTINUED_FIRST, ENDED_FIRST

T0 = 1_767_225_600_000


class History:
    def __init__(self) -> None:
        self.events = [Event(1, WORKFLOW_STARTED, {"input": None, "seed": "s"}, T0)]

    def add(self, type_: str, **payload: Any) -> History:
        self.events.append(Event(len(self.events) + 1, type_, payload, T0 + len(self.events)))
        return self

    def update(self, update_id: str, name: str = "add", payload: Any = None) -> History:
        return self.add(UPDATE_ACCEPTED, update_id=update_id, name=name, payload=payload)

    def record(self, outcome: Any) -> History:
        for command in outcome.commands:
            self.add(command.event_type, **command.event_payload())
        if isinstance(outcome, Completed):
            self.add(outcome.event_type, **outcome.event_payload())
        return self


def cart(ctx: Context, _: Any) -> Any:
    """Collect items from updates until a "checkout" signal, then bill them."""
    ctx.state["items"] = []
    ctx.select(ctx.wait_signal("checkout"))
    ctx.state["stage"] = "billing"
    return ctx.execute_operation("bill", "1", list(ctx.state["items"])).result()


def add(ctx: Context, item: Any) -> int:
    ctx.state["items"].append(item)
    return len(ctx.state["items"])


UPDATES = {"add": add}


def run(h: History, fn: Any = cart, updates: Any = UPDATES) -> Any:
    return replay(fn, None, h.events, workflow_id="wf", updates=updates)


def status(ctx: Context) -> Any:
    return {"items": ctx.state.get("items"), "stage": ctx.state.get("stage", "shopping")}


def ask(h: History, handler: Any = status, *args: Any, fn: Any = cart) -> Any:
    return run_query(fn, None, h.events, handler, args, workflow_id="wf", updates=UPDATES)


def test_an_update_runs_while_the_code_waits_and_its_outcome_is_recorded_once() -> None:
    h = History()
    assert run(h) == Parked([], None, ("signal:checkout:1",))
    h.update("u1", payload="apple")
    first = run(h)
    assert first == Parked([CompleteUpdate("u1", result=1)], None, ("signal:checkout:1",))
    h.record(first)
    assert h.events[-1].payload == {"update_id": "u1", "result": 1}
    assert run(h) == Parked([], None, ("signal:checkout:1",))  # handled again, not recorded
    h.update("u2", payload="pear").add(SIGNAL_RECEIVED, name="checkout", payload=None)
    second = run(h)
    assert isinstance(second, Parked)
    # u2 came before the signal that woke the code: it ran first, and the bill has both.
    select, done, bill = second.commands
    assert isinstance(select, RecordSelect) and done == CompleteUpdate("u2", result=2)
    assert bill.input == ["apple", "pear"]  # type: ignore[union-attr]


def test_an_update_after_the_fact_that_woke_the_code_is_not_seen_by_it() -> None:
    h = History()
    h.add(SIGNAL_RECEIVED, name="checkout", payload=None).update("late", payload="plum")
    outcome = run(h)
    assert isinstance(outcome, Parked)
    assert outcome.commands[1].input == []  # type: ignore[union-attr]
    # …but the code waits again (on the bill), so the update runs there.
    assert outcome.commands[-1] == CompleteUpdate("late", result=1)


def test_an_update_the_code_never_reaches_is_recorded_as_unhandled() -> None:
    def quick(ctx: Context, _: Any) -> Any:
        ctx.state["items"] = []
        ctx.select(ctx.wait_signal("go"))
        return "done"

    h = History().add(SIGNAL_RECEIVED, name="go", payload=None).update("u1", payload="x")
    outcome = run(h, quick)
    assert isinstance(outcome, Completed)
    assert outcome.commands[-1] == CompleteUpdate("u1", error=ENDED_FIRST, handled=False)
    h.record(outcome)
    assert h.events[-2].payload == {"update_id": "u1", "error": ENDED_FIRST, "handled": False}
    assert run(h, quick) == Completed("done", [])  # and it replays


def test_a_run_that_continues_as_new_records_its_unhandled_updates_first() -> None:
    def hops(ctx: Context, _: Any) -> Any:
        ctx.state["items"] = []
        ctx.select(ctx.wait_signal("go"))
        ctx.continue_as_new("next")

    h = History().add(SIGNAL_RECEIVED, name="go", payload=None).update("u1", payload="x")
    outcome = run(h, hops)
    assert isinstance(outcome, ContinuedAsNew) and outcome.input == "next"
    assert outcome.commands[-1] == CompleteUpdate("u1", error=CONTINUED_FIRST, handled=False)
    assert outcome.carried == ()  # an update is not a signal: the next run gets none
    h.record(outcome)
    h.add(outcome.event_type, **outcome.event_payload())
    assert run(h, hops) == ContinuedAsNew("next", (), [])  # and the ended run replays


def test_a_handler_that_raises_fails_the_update_not_the_workflow() -> None:
    def picky(ctx: Context, item: Any) -> Any:
        raise ValueError(f"no {item}")

    h = History()
    h.record(run(h)).update("u1", payload="x")
    outcome = run(h, updates={"add": picky})
    assert outcome == Parked(
        [CompleteUpdate("u1", error="ValueError: no x")], None, ("signal:checkout:1",)
    )


def test_a_handler_cannot_issue_commands_or_wait() -> None:
    def sneaky(ctx: Context, _: Any) -> Any:
        ctx.sleep(timedelta(seconds=1))

    h = History()
    h.record(run(h)).update("u1")
    outcome = run(h, updates={"add": sneaky})
    assert isinstance(outcome, Parked)
    (command,) = outcome.commands
    assert isinstance(command, CompleteUpdate)
    assert command.error is not None and command.error.startswith("HandlerCommandError: ")


def test_a_result_that_is_not_json_fails_the_update() -> None:
    h = History()
    h.record(run(h)).update("u1")
    outcome = run(h, updates={"add": lambda ctx, _: {1, 2}})
    assert isinstance(outcome, Parked)
    error = outcome.commands[0].error  # type: ignore[union-attr]
    assert error.startswith("TypeError: the update's result is not JSON")


def test_an_update_without_a_handler_is_nondeterministic() -> None:
    h = History()
    h.record(run(h)).update("u1", name="remove")
    outcome = run(h)
    assert isinstance(outcome, Nondeterministic)
    assert "has no update handler 'remove'" in str(outcome.error)


def test_a_handled_update_the_code_now_ends_before_is_nondeterministic() -> None:
    def wait_then_end(ctx: Context, _: Any) -> Any:
        ctx.state["items"] = []
        ctx.select(ctx.wait_signal("go"))
        return "done"

    h = History()
    h.record(run(h, wait_then_end)).update("u1", payload="x")
    h.record(run(h, wait_then_end)).add(SIGNAL_RECEIVED, name="go", payload=None)
    h.record(run(h, wait_then_end))
    assert run(h, wait_then_end) == Completed("done", [])

    def no_wait(ctx: Context, _: Any) -> Any:
        ctx.state["items"] = []
        return "done"

    changed = History()
    changed.events = [e for e in h.events if e.type != SELECT_RESOLVED]
    outcome = replay(no_wait, None, changed.events, workflow_id="wf", updates=UPDATES)
    assert isinstance(outcome, Nondeterministic)


def test_a_query_sees_the_state_as_of_the_last_event_and_records_nothing() -> None:
    h = History()
    h.record(run(h))
    assert ask(h) == Answered({"items": [], "stage": "shopping"}, 1)
    h.update("u1", payload="apple")  # accepted, no pass yet: the code handles it as it waits
    assert ask(h) == Answered({"items": ["apple"], "stage": "shopping"}, 2)
    h.record(run(h)).add(SIGNAL_RECEIVED, name="checkout", payload=None)
    # The code now schedules the bill, which the query's replay refuses (records nothing).
    assert ask(h) == Answered({"items": ["apple"], "stage": "billing"}, 4)
    assert len(h.events) == 4


def test_a_query_handler_that_issues_a_command_or_raises_is_refused() -> None:
    h = History()
    h.record(run(h))

    def sneaky(ctx: Context) -> Any:
        return ctx.execute_operation("bill", "1", None)

    refused = ask(h, sneaky)
    assert isinstance(refused, Raised) and refused.reason.startswith("HandlerCommandError: ")
    raised = ask(h, lambda ctx, n: 1 / n, 0)
    assert raised == Raised("ZeroDivisionError: division by zero", 1)


def test_a_query_on_a_finished_history_sees_the_end_state() -> None:
    h = History()
    h.record(run(h)).add(SIGNAL_RECEIVED, name="checkout", payload=None)
    h.record(run(h))
    h.add(OPERATION_COMPLETED, command_id="op:1", result="billed")
    h.record(run(h))
    assert [e.type for e in h.events][-4:] == [
        SELECT_RESOLVED,
        OPERATION_SCHEDULED,
        OPERATION_COMPLETED,
        WORKFLOW_COMPLETED,
    ]
    assert ask(h) == Answered({"items": [], "stage": "billing"}, 6)


def test_a_query_of_code_that_diverged_reports_it() -> None:
    h = History()
    h.record(run(h))
    h.add(SIGNAL_RECEIVED, name="checkout", payload=None)
    h.record(run(h))

    def other(ctx: Context, _: Any) -> Any:
        ctx.state["items"] = []
        return ctx.execute_operation("refund", "1", None).result()

    assert isinstance(ask(h, fn=other), Nondeterministic)


def test_update_events_are_validated() -> None:
    h = History().update("u1").update("u1")
    assert "already accepted" in str(run(h).error)  # type: ignore[union-attr]
    h = History().add(UPDATE_COMPLETED, update_id="nope", result=1)
    assert "never accepted" in str(run(h).error)  # type: ignore[union-attr]

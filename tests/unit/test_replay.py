"""The durable replay engine, driven the way the runtime will drive it.

``Sim`` plays the runtime in memory: it runs a pass, appends the events the contract in
``headgate_django.kernel.replay`` prescribes for each command and outcome, settles Operations,
delivers signals and fires due timers, and replays again until the execution ends. It is test
code standing in for the orchestration layer, not a fake store.

azync REPLAY CONFORMANCE CASES covered here (pure-engine part): 3, 4 (replay after a crash
issues no second command), 5 (the retried schedule recomputes the same execution key), 8, 9,
10, 12, 14, 18, 19, 20, 22, 24, 25, 28, 29, 36, 37, 38, 39 — the last two with the recommended
target outcome, not azync's hazard.

Cases that need the database runtime, and why:
- 1, 2, 21, 23, 26, 30, 31, 32, 34: start dedupe, business keys, the signal inbox, execution
  states (suspend/resume/cancel), unknown workflow versions and vacuum live in the store and
  the worker, not in replay.
- 4, 5, 6 (the job side), 7, 11, 13, 15, 16, 17, 40: Operation jobs, retries, snooze, leases,
  heartbeats, fencing and reaping belong to the job machinery; replay only sees the facts those
  produce (the facts themselves are covered above).
- 27: an unregistered Operation is the worker's call; per DESIGN §4 a worker lacking it leaves
  the job for one that has it instead of failing it durably (azync hazard 8).
- 33, 35: the reconciler and the registration decorators.
"""

from __future__ import annotations

import ast
import json
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from headgate_django.exceptions import (
    HistoryCorruptError,
    NondeterminismError,
    OperationFailedError,
)
from headgate_django.kernel.replay import Context, ReplayUnwind, check_history, replay
from headgate_django.kernel.replay_events import (
    OPERATION_COMPLETED,
    OPERATION_FAILED,
    OPERATION_SCHEDULED,
    OPERATION_UNCERTAIN,
    OPERATION_UNCERTAIN_RESOLVED,
    SELECT_RESOLVED,
    SIGNAL_RECEIVED,
    TIMER_FIRED,
    TIMER_SCHEDULED,
    WORKFLOW_COMPLETED,
    WORKFLOW_FAILED,
    WORKFLOW_STARTED,
    Completed,
    Event,
    Failed,
    Nondeterministic,
    Outcome,
    Parked,
    RecordSelect,
    ScheduleOperation,
    StartTimer,
    due_timers,
    history_from_json,
    history_to_json,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


class Sim:
    """The runtime's side of the contract, in memory."""

    def __init__(self, fn: Callable[[Context, Any], Any], input: Any = None) -> None:
        self.fn = fn
        self.input = input
        self.now_ms = T0
        self.history: list[Event] = []
        self.jobs: dict[str, ScheduleOperation] = {}
        self.append(WORKFLOW_STARTED, {"input": input, "seed": "seed-1"})

    def append(self, type_: str, payload: dict[str, Any]) -> Event:
        event = Event(len(self.history) + 1, type_, payload, self.now_ms)
        self.history.append(event)
        return event

    def run_pass(self) -> Outcome:
        for cid in due_timers(self.history, self.now_ms):
            self.append(TIMER_FIRED, {"command_id": cid})
        outcome = replay(self.fn, self.input, self.history, workflow_id="wf-1", now_ms=self.now_ms)
        if isinstance(outcome, Nondeterministic):
            return outcome
        for command in outcome.commands:
            self.append(command.event_type, command.event_payload())
            if isinstance(command, ScheduleOperation):
                self.jobs[command.command_id] = command
        if isinstance(outcome, Completed | Failed):
            self.append(outcome.event_type, outcome.event_payload())
        return outcome

    def complete(self, cid: str, result: Any = None) -> None:
        self.jobs.pop(cid)
        self.append(OPERATION_COMPLETED, {"command_id": cid, "result": result})

    def fail(self, cid: str, error: str) -> None:
        self.jobs.pop(cid)
        self.append(OPERATION_FAILED, {"command_id": cid, "error": error})

    def signal(self, name: str, payload: Any = None) -> None:
        self.append(SIGNAL_RECEIVED, {"name": name, "payload": payload})

    def types(self) -> list[str]:
        return [event.type for event in self.history]

    def drive(self, handlers: dict[str, Callable[[Any], Any]], max_passes: int = 500) -> Outcome:
        """Pass, run every scheduled Operation, jump the clock to the next timer; repeat until
        the execution ends or waits for something only a signal can bring."""
        for _ in range(max_passes):
            outcome = self.run_pass()
            if not isinstance(outcome, Parked):
                return outcome
            if self.jobs:
                for cid, job in list(self.jobs.items()):
                    self.now_ms += 10
                    self.complete(cid, handlers[job.name](job.input))
            elif outcome.wake_at_ms is not None:
                self.now_ms = max(self.now_ms, outcome.wake_at_ms)
            else:
                return outcome
        raise AssertionError("the workflow never settled")


def started(at_ms: int = T0, seed: str = "seed-1") -> Event:
    return Event(1, WORKFLOW_STARTED, {"input": None, "seed": seed}, at_ms)


def nondeterminism(outcome: Outcome) -> NondeterminismError:
    assert isinstance(outcome, Nondeterministic), outcome
    return outcome.error


# -- conformance cases -------------------------------------------------------------


def check_status(ctx: Context, order: dict[str, Any]) -> Any:
    return ctx.execute_operation("check-status", "1", {"ref": order["ref"]}).result()


def test_case_03_one_operation() -> None:
    sim = Sim(check_status, {"ref": "abc"})
    first = sim.run_pass()
    op = ScheduleOperation("op:1", "check-status", "1", {"ref": "abc"}, "wf-1:op:1")
    assert first == Parked([op], None, ("op:1",))
    assert sim.types() == [WORKFLOW_STARTED, OPERATION_SCHEDULED]
    assert sim.history[1].payload == {
        "command_id": "op:1",
        "name": "check-status",
        "version": "1",
        "input": {"ref": "abc"},
        "execution_key": "wf-1:op:1",
    }
    sim.complete("op:1", {"status": "approved"})
    assert sim.run_pass() == Completed({"status": "approved"}, [])
    assert sim.types() == [
        WORKFLOW_STARTED,
        OPERATION_SCHEDULED,
        OPERATION_COMPLETED,
        WORKFLOW_COMPLETED,
    ]
    assert sim.history[-1].payload == {"result": {"status": "approved"}}


def test_case_04_replay_after_a_crash_before_settlement_schedules_nothing_new() -> None:
    sim = Sim(check_status, {"ref": "abc"})
    sim.run_pass()
    # The worker crashed after recording OperationScheduled; every later pass parks on it.
    for _ in range(3):
        assert sim.run_pass() == Parked([], None, ("op:1",))
    assert sim.types() == [WORKFLOW_STARTED, OPERATION_SCHEDULED]


def test_case_05_a_retried_schedule_recomputes_the_same_execution_key() -> None:
    history = [started()]  # the first attempt died before OperationScheduled was recorded
    first = replay(check_status, {"ref": "abc"}, history, workflow_id="wf-1", now_ms=T0)
    again = replay(check_status, {"ref": "abc"}, history, workflow_id="wf-1", now_ms=T0 + 999)
    assert isinstance(first, Parked) and isinstance(again, Parked)
    assert first.commands == again.commands
    assert [c.execution_key for c in again.commands] == ["wf-1:op:1"]  # type: ignore[union-attr]


def test_case_08_an_exhausted_operation_fails_the_workflow_with_its_error() -> None:
    sim = Sim(check_status, {"ref": "abc"})
    sim.run_pass()
    sim.fail("op:1", "operation panic: boom\nTraceback ...")
    outcome = sim.run_pass()
    assert outcome == Failed("OperationFailedError: operation panic: boom\nTraceback ...", [])
    assert sim.history[-1].type == WORKFLOW_FAILED
    assert "operation panic" in sim.history[-1].payload["reason"]


def test_case_09_an_aborted_operation_is_a_failed_future() -> None:
    def inspect_failure(ctx: Context, _: Any) -> list[Any]:
        future = ctx.execute_operation("charge", "1", {"cents": 500})
        error = future.exception()
        assert isinstance(error, OperationFailedError)
        with pytest.raises(OperationFailedError) as raised:
            future.result()
        return [str(error), error.details["command_id"], str(raised.value)]

    sim = Sim(inspect_failure)
    sim.run_pass()
    sim.fail("op:1", "card declined")
    assert sim.run_pass() == Completed(["card declined", "op:1", "card declined"], [])


def test_case_10_a_skipped_operation_completes_with_none() -> None:
    def done(ctx: Context, _: Any) -> str:
        value = ctx.execute_operation("notify", "1").result()
        return f"done:{value or ''}"

    sim = Sim(done)
    sim.run_pass()
    sim.jobs.pop("op:1")
    sim.append(OPERATION_COMPLETED, {"command_id": "op:1"})  # Skip: no result
    assert sim.run_pass() == Completed("done:", [])


def test_case_12_an_uncertain_operation_parks_until_resolved_complete() -> None:
    sim = Sim(check_status, {"ref": "abc"})
    sim.run_pass()
    sim.append(OPERATION_UNCERTAIN, {"command_id": "op:1", "reason": "timeout"})
    assert sim.run_pass() == Parked([], None, ("op:1",))
    sim.append(OPERATION_UNCERTAIN_RESOLVED, {"command_id": "op:1", "decision": "complete"})
    sim.complete("op:1", "ok")
    assert sim.run_pass() == Completed("ok", [])


def test_case_12_resolve_retry_keeps_waiting_for_the_rerun() -> None:
    sim = Sim(check_status, {"ref": "abc"})
    sim.run_pass()
    sim.append(OPERATION_UNCERTAIN, {"command_id": "op:1", "reason": "timeout"})
    sim.append(OPERATION_UNCERTAIN_RESOLVED, {"command_id": "op:1", "decision": "retry"})
    assert sim.run_pass() == Parked([], None, ("op:1",))
    sim.complete("op:1", "second try")
    assert sim.run_pass() == Completed("second try", [])


def test_case_14_resolve_fail_gives_the_recorded_error() -> None:
    def catch(ctx: Context, _: Any) -> str:
        error = ctx.execute_operation("charge", "1").exception()
        return str(error)

    sim = Sim(catch)
    sim.run_pass()
    sim.append(OPERATION_UNCERTAIN, {"command_id": "op:1", "reason": "timeout"})
    sim.append(OPERATION_UNCERTAIN_RESOLVED, {"command_id": "op:1", "decision": "fail"})
    sim.fail("op:1", "x")
    assert sim.run_pass() == Completed("x", [])
    # No error text at all still gives a readable message.
    history = [*sim.history[:4], Event(5, OPERATION_FAILED, {"command_id": "op:1"}, T0)]
    assert replay(catch, None, history, workflow_id="wf-1") == Completed("operation failed", [])


def test_case_18_sleep_parks_until_the_timer_fires() -> None:
    def nap(ctx: Context, _: Any) -> str:
        ctx.select(ctx.sleep(timedelta(milliseconds=50)))
        return ctx.now().isoformat()

    sim = Sim(nap)
    assert sim.run_pass() == Parked([StartTimer("timer:1", 50, T0 + 50)], T0 + 50, ("timer:1",))
    sim.now_ms = T0 + 49
    assert sim.run_pass() == Parked([], T0 + 50, ("timer:1",))
    assert TIMER_FIRED not in sim.types()
    sim.now_ms = T0 + 50
    outcome = sim.run_pass()
    assert outcome == Completed(
        "2026-01-01T00:00:00.050000+00:00", [RecordSelect("select:1", 0, ("timer:1",))]
    )
    assert sim.types() == [
        WORKFLOW_STARTED,
        TIMER_SCHEDULED,
        TIMER_FIRED,
        SELECT_RESOLVED,
        WORKFLOW_COMPLETED,
    ]


def approval(ctx: Context, _: Any) -> Any:
    signal = ctx.wait_signal("approval")
    index = ctx.select(signal, ctx.sleep(timedelta(hours=1)))
    return signal.result() if index == 0 else "timed out"


def test_case_19_a_signal_wakes_a_select_without_tripping_the_timer() -> None:
    sim = Sim(approval)
    timer = StartTimer("timer:1", HOUR_MS, T0 + HOUR_MS)
    assert sim.run_pass() == Parked([timer], T0 + HOUR_MS, ("signal:approval:1", "timer:1"))
    assert sim.types() == [WORKFLOW_STARTED, TIMER_SCHEDULED]
    sim.now_ms += 1_000
    sim.signal("approval", "approved")
    decided = RecordSelect("select:1", 0, ("signal:approval:1", "timer:1"))
    assert sim.run_pass() == Completed("approved", [decided])
    assert sim.types()[2:] == [SIGNAL_RECEIVED, SELECT_RESOLVED, WORKFLOW_COMPLETED]
    assert sim.history[3].payload == {
        "command_id": "select:1",
        "index": 0,
        "futures": ["signal:approval:1", "timer:1"],
    }
    assert check_history(approval, None, sim.history) is None


def test_case_20_an_early_signal_is_ready_after_the_operation() -> None:
    def early(ctx: Context, _: Any) -> list[Any]:
        ctx.execute_operation("prepare", "1").result()
        signal = ctx.wait_signal("go")
        was_ready = signal.ready
        index = ctx.select(signal, ctx.sleep(timedelta(minutes=5)))
        return [was_ready, index, signal.result()]

    sim = Sim(early)
    sim.run_pass()
    sim.signal("go", "now")  # delivered while the workflow is parked on the Operation
    sim.complete("op:1")
    outcome = sim.run_pass()
    assert isinstance(outcome, Completed)
    assert outcome.result == [True, 0, "now"]
    assert outcome.commands[-1] == RecordSelect("select:1", 0, ("signal:go:1", "timer:1"))


def test_an_early_signal_before_the_first_pass_is_selected_without_parking() -> None:
    sim = Sim(approval)
    sim.signal("approval", "pre-approved")  # arrives before any pass ran
    outcome = sim.run_pass()
    assert isinstance(outcome, Completed)
    assert outcome.result == "pre-approved"


def test_case_22_signals_match_waits_by_ordinal() -> None:
    def two(ctx: Context, _: Any) -> list[Any]:
        first, second = ctx.wait_signal("x"), ctx.wait_signal("x")
        return [first.result(), second.result()]

    sim = Sim(two)
    sim.signal("x", "a")
    assert sim.run_pass() == Parked([], None, ("signal:x:2",))
    sim.signal("y", "other name")
    sim.signal("x", "b")
    assert sim.run_pass() == Completed(["a", "b"], [])


def test_case_24_select_edge_cases() -> None:
    def no_futures(ctx: Context, _: Any) -> int:
        return ctx.select()

    outcome = replay(no_futures, None, [started()], workflow_id="wf-1")
    assert outcome == Failed("ValueError: select() needs at least one future", [])

    def both_ready(ctx: Context, _: Any) -> list[int]:
        late, early = ctx.wait_signal("late"), ctx.wait_signal("early")
        before = ctx.select(late, early)  # neither settled yet: waits for the first to arrive
        ctx.execute_operation("step", "1").result()  # both signals arrived before this one
        return [before, ctx.select(late, early)]

    sim = Sim(both_ready)
    sim.signal("early", 1)
    sim.signal("late", 2)
    decided = RecordSelect("select:2", 0, ("signal:late:1", "signal:early:1"))
    assert sim.drive({"step": lambda _: None}) == Completed([1, 0], [decided])

    def signals_only(ctx: Context, _: Any) -> int:
        return ctx.select(ctx.wait_signal("a"), ctx.wait_signal("b"))

    parked = replay(signals_only, None, [started()], workflow_id="wf-1")
    assert parked == Parked([], None, ("signal:a:1", "signal:b:1"))


def test_case_25_a_raising_workflow_fails_with_its_reason() -> None:
    def out_of_stock(ctx: Context, _: Any) -> None:
        raise ValueError("no stock for sku-7")

    sim = Sim(out_of_stock)
    assert sim.run_pass() == Failed("ValueError: no stock for sku-7", [])
    assert sim.history[-1] == Event(
        2, WORKFLOW_FAILED, {"reason": "ValueError: no stock for sku-7"}, T0
    )


def test_case_28_corrupt_history_is_a_replay_error_not_a_failure() -> None:
    history = [
        started(),
        Event(2, OPERATION_SCHEDULED, {"command_id": "op:1", "name": "c", "version": "1"}, T0),
        Event(3, OPERATION_COMPLETED, "{not json", T0),  # type: ignore[arg-type]
    ]
    error = nondeterminism(replay(check_status, {"ref": "abc"}, history, workflow_id="wf-1"))
    assert isinstance(error, HistoryCorruptError)
    assert (
        str(error)
        == "History event 3 (OperationCompleted) is malformed: its payload is not an object."
    )
    with pytest.raises(HistoryCorruptError, match="not valid JSON"):
        history_from_json('{"workflow": ')


def test_case_29_a_primitive_of_another_kind_is_nondeterministic() -> None:
    scheduled = Event(
        2, OPERATION_SCHEDULED, {"command_id": "op:1", "name": "check", "version": "1"}, T0
    )

    def sleeps(ctx: Context, _: Any) -> None:
        ctx.select(ctx.sleep(timedelta(seconds=1)))

    error = nondeterminism(replay(sleeps, None, [started(), scheduled], workflow_id="wf-1"))
    assert str(error) == (
        "timer:1: the code issues a new command while history still expects op:1 "
        "(OperationScheduled(name='check', version='1') at seq 2), which the code has not issued."
    )
    timer = Event(
        2, TIMER_SCHEDULED, {"command_id": "timer:1", "duration_ms": 5, "fire_at_ms": T0 + 5}, T0
    )
    error = nondeterminism(replay(check_status, {"ref": "r"}, [started(), timer], workflow_id="w"))
    assert error.details == {"command_id": "op:1", "expected": "timer:1"}


def _op(seq: int, cid: str = "op:1") -> Event:
    return Event(seq, OPERATION_SCHEDULED, {"command_id": cid, "name": "n", "version": "1"}, T0)


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ([], "The history is empty"),
        (
            [Event(1, SIGNAL_RECEIVED, {"name": "x"}, T0)],
            "must start with WorkflowStarted at seq 1",
        ),
        ([started(), _op(3)], "seq 3 follows seq 1"),
        ([started(), _op(2), _op(3)], "op:1 was already recorded at seq 2"),
        (
            [started(), Event(2, TIMER_FIRED, {"command_id": "timer:1"}, T0)],
            "timer:1 was never scheduled",
        ),
        (
            [started(), _op(2), Event(3, TIMER_FIRED, {"command_id": "op:1"}, T0)],
            "does not start with 'timer:'",
        ),
        (
            [started(), Event(2, OPERATION_COMPLETED, {"command_id": "op:9"}, T0)],
            "op:9 was never scheduled",
        ),
        (
            [
                started(),
                _op(2),
                *(Event(s, OPERATION_COMPLETED, {"command_id": "op:1"}, T0) for s in (3, 4)),
            ],
            "op:1 was already settled at seq 3",
        ),
        (
            [started(), Event(2, WORKFLOW_STARTED, {}, T0)],
            "WorkflowStarted may only be the first event",
        ),
        ([started(), Event(2, "Mystery", {}, T0)], "the event type is unknown"),
        (
            [started(), Event(2, SIGNAL_RECEIVED, {"name": ""}, T0)],
            "'name' must be a non-empty str",
        ),
    ],
)
def test_case_36_history_must_be_contiguous_and_well_typed(
    history: list[Event], message: str
) -> None:
    error = nondeterminism(replay(check_status, {"ref": "r"}, history, workflow_id="wf-1"))
    assert isinstance(error, HistoryCorruptError)
    assert message in str(error)


def test_case_37_replay_uses_the_recorded_fire_time() -> None:
    def minute(ctx: Context, _: Any) -> None:
        ctx.select(ctx.sleep(timedelta(minutes=1)))

    sim = Sim(minute)
    assert sim.run_pass() == Parked(
        [StartTimer("timer:1", MINUTE_MS, T0 + MINUTE_MS)], T0 + MINUTE_MS, ("timer:1",)
    )
    # A later pass computes nothing new from its own clock: the recorded fire time stands.
    later = replay(minute, None, sim.history, workflow_id="wf-1", now_ms=T0 + 30_000)
    assert later == Parked([], T0 + MINUTE_MS, ("timer:1",))
    assert due_timers(sim.history, T0 + MINUTE_MS - 1) == []
    assert due_timers(sim.history, T0 + MINUTE_MS) == ["timer:1"]


def hazard_a(ctx: Context, _: Any) -> Any:
    signal = ctx.wait_signal("s")
    if ctx.select(signal, ctx.sleep(timedelta(hours=1))) == 1:
        return "expired"
    result = ctx.execute_operation("approve", "1", signal.result()).result()
    ctx.select(ctx.sleep(timedelta(minutes=1)))
    return result


def test_case_38_a_losing_timer_does_not_break_later_replays() -> None:
    sim = Sim(hazard_a)
    sim.run_pass()
    sim.signal("s", {"by": "ops"})
    outcome = sim.drive({"approve": lambda by: f"approved by {by['by']}"})
    assert outcome == Completed("approved by ops", [RecordSelect("select:2", 0, ("timer:2",))])
    assert sim.types().count(TIMER_SCHEDULED) == 2
    # The losing hour timer still fires later; replaying the full history stays clean.
    sim.now_ms = T0 + 2 * HOUR_MS
    for cid in due_timers(sim.history, sim.now_ms):
        sim.append(TIMER_FIRED, {"command_id": cid})
    assert sim.history[-1].payload == {"command_id": "timer:1"}
    assert replay(hazard_a, None, sim.history, workflow_id="wf-1") == Completed(
        "approved by ops", []
    )


def hazard_b(ctx: Context, _: Any) -> Any:
    signal = ctx.wait_signal("s")
    if ctx.select(signal, ctx.sleep(timedelta(minutes=1))) == 0:
        return ctx.execute_operation("approve", "1").result()
    return ctx.execute_operation("expire", "1").result()


def test_case_39_a_late_signal_cannot_flip_an_earlier_select() -> None:
    sim = Sim(hazard_b)
    sim.run_pass()
    sim.now_ms += MINUTE_MS
    outcome = sim.run_pass()  # the timer fired first
    assert isinstance(outcome, Parked)
    assert outcome.commands == [
        RecordSelect("select:1", 1, ("signal:s:1", "timer:1")),
        ScheduleOperation("op:1", "expire", "1", None, "wf-1:op:1"),
    ]
    sim.signal("s", "too late")
    assert sim.run_pass() == Parked([], None, ("op:1",))
    sim.complete("op:1", "expired")
    assert sim.run_pass() == Completed("expired", [])
    scheduled = [e.payload["name"] for e in sim.history if e.type == OPERATION_SCHEDULED]
    assert scheduled == ["expire"]


# -- hazards and guarantees -------------------------------------------------------------


def charge_then_ship(ctx: Context, order: Any) -> list[Any]:
    receipt = ctx.execute_operation("charge", "1", order).result()
    label = ctx.execute_operation("ship", "1", order).result()
    return [receipt, label]


def recorded_charge_then_ship() -> list[Event]:
    sim = Sim(charge_then_ship, {"id": 42})
    assert sim.drive({"charge": lambda _: "r-1", "ship": lambda _: "l-1"}) == Completed(
        ["r-1", "l-1"], []
    )
    return sim.history


def test_an_operation_name_mismatch_is_nondeterministic() -> None:
    def renamed(ctx: Context, order: Any) -> Any:
        return ctx.execute_operation("bill", "1", order).result()

    error = nondeterminism(
        replay(renamed, {"id": 42}, recorded_charge_then_ship(), workflow_id="wf-1")
    )
    assert str(error) == (
        "op:1: the code schedules Operation 'bill' version '1', but history has op:1 "
        "(OperationScheduled(name='charge', version='1') at seq 2)."
    )
    assert error.details == {"command_id": "op:1", "expected": "charge@1", "actual": "bill@1"}


def test_an_operation_version_mismatch_is_nondeterministic() -> None:
    def bumped(ctx: Context, order: Any) -> Any:
        ctx.execute_operation("charge", "1", order).result()
        return ctx.execute_operation("ship", "2", order).result()

    error = nondeterminism(
        replay(bumped, {"id": 42}, recorded_charge_then_ship(), workflow_id="wf-1")
    )
    assert error.details == {"command_id": "op:2", "expected": "ship@1", "actual": "ship@2"}


def test_a_timer_duration_mismatch_is_nondeterministic() -> None:
    history = [
        started(),
        Event(
            2,
            TIMER_SCHEDULED,
            {"command_id": "timer:1", "duration_ms": MINUTE_MS, "fire_at_ms": T0 + MINUTE_MS},
            T0,
        ),
    ]

    def two_minutes(ctx: Context, _: Any) -> None:
        ctx.select(ctx.sleep(timedelta(minutes=2)))

    error = nondeterminism(replay(two_minutes, None, history, workflow_id="wf-1"))
    assert str(error) == (
        "timer:1: the code sleeps 120000 ms, but history has timer:1 "
        "(TimerScheduled(duration_ms=60000) at seq 2)."
    )
    assert error.details == {"command_id": "timer:1", "expected": 60000, "actual": 120000}


def test_unconsumed_history_is_nondeterministic() -> None:
    def charge_only(ctx: Context, order: Any) -> Any:
        return ctx.execute_operation("charge", "1", order).result()

    error = nondeterminism(
        replay(charge_only, {"id": 42}, recorded_charge_then_ship(), workflow_id="wf-1")
    )
    assert str(error) == (
        "op:2: history has op:2 (OperationScheduled(name='ship', version='1') at seq 4), "
        "but the code returns without issuing it."
    )

    def gives_up(ctx: Context, order: Any) -> Any:
        ctx.execute_operation("charge", "1", order).result()
        raise RuntimeError("changed my mind")

    error = nondeterminism(
        replay(gives_up, {"id": 42}, recorded_charge_then_ship(), workflow_id="wf-1")
    )
    assert "but the code fails with 'RuntimeError: changed my mind' without issuing it" in str(
        error
    )


def test_a_recorded_ending_must_still_be_reached() -> None:
    def now_fails(ctx: Context, order: Any) -> Any:
        charge_then_ship(ctx, order)
        raise ValueError("new rule")

    error = nondeterminism(
        replay(now_fails, {"id": 42}, recorded_charge_then_ship(), workflow_id="wf-1")
    )
    assert str(error) == (
        "History records WorkflowCompleted at seq 6, but the code now fails with "
        "'ValueError: new rule'."
    )

    def now_sleeps_at_the_end(ctx: Context, order: Any) -> Any:
        result = charge_then_ship(ctx, order)
        ctx.sleep(timedelta(seconds=1))
        return result

    error = nondeterminism(
        replay(now_sleeps_at_the_end, {"id": 42}, recorded_charge_then_ship(), workflow_id="wf-1")
    )
    assert str(error).startswith("timer:1: history ends with WorkflowCompleted at seq 6")


def test_reordered_select_arguments_are_nondeterministic() -> None:
    sim = Sim(approval)
    sim.run_pass()
    sim.signal("approval", "yes")
    sim.run_pass()

    def reordered(ctx: Context, _: Any) -> Any:
        signal = ctx.wait_signal("approval")
        timer = ctx.sleep(timedelta(hours=1))
        return ctx.select(timer, signal)

    error = nondeterminism(replay(reordered, None, sim.history, workflow_id="wf-1"))
    assert error.details == {
        "command_id": "select:1",
        "expected": ["signal:approval:1", "timer:1"],
        "actual": ["timer:1", "signal:approval:1"],
    }


def test_except_exception_cannot_swallow_parking() -> None:
    assert issubclass(ReplayUnwind, BaseException)
    assert not issubclass(ReplayUnwind, Exception)

    def swallows(ctx: Context, _: Any) -> str:
        try:
            ctx.execute_operation("slow", "1").result()
        except Exception:
            return "swallowed"
        return "finished"

    op = ScheduleOperation("op:1", "slow", "1", None, "wf-1:op:1")
    assert replay(swallows, None, [started()], workflow_id="wf-1") == Parked([op], None, ("op:1",))

    def swallows_everything(ctx: Context, _: Any) -> str:
        try:  # noqa: SIM105 - written the way careless workflow code would be
            ctx.execute_operation("slow", "1")
        except BaseException:
            pass
        ctx.execute_operation("other", "1")  # the pass is stopped: this unwinds again
        return "swallowed"

    outcome = replay(swallows_everything, None, [started()], workflow_id="wf-1")
    assert outcome == Parked([op], None, ("op:1",))


def test_now_random_and_uuid_are_identical_across_replays() -> None:
    def stamps(ctx: Context, _: Any) -> list[Any]:
        seen = [ctx.now().isoformat(), ctx.random(), str(ctx.uuid4())]
        ctx.execute_operation("step", "1").result()
        return [*seen, ctx.now().isoformat(), ctx.random(), str(ctx.uuid4())]

    sim = Sim(stamps)
    sim.run_pass()
    sim.now_ms = T0 + 250  # the store time at which the Operation's result lands
    sim.complete("op:1")
    sim.now_ms = T0 + 90_000  # the pass itself runs much later
    outcome = sim.run_pass()
    assert isinstance(outcome, Completed)
    values = random.Random("seed-1:random")
    ids = random.Random("seed-1:uuid4")
    first_uuid, second_uuid = (str(uuid.UUID(int=ids.getrandbits(128), version=4)) for _ in "ab")
    assert outcome.result == [
        "2026-01-01T00:00:00+00:00",
        values.random(),
        first_uuid,
        "2026-01-01T00:00:00.250000+00:00",
        values.random(),
        second_uuid,
    ]
    assert uuid.UUID(first_uuid).version == 4
    for now_ms in (T0 + 1, T0 + 10 * HOUR_MS):
        again = replay(stamps, None, sim.history, workflow_id="other", now_ms=now_ms)
        assert again == Completed(outcome.result, [])
    other_seed = [started(seed="seed-2"), *sim.history[1:]]
    other = replay(stamps, None, other_seed, workflow_id="wf-1")
    assert isinstance(other, Completed)
    assert other.result[0::3] == outcome.result[0::3]  # the clock does not depend on the seed
    assert other.result[1] != outcome.result[1] and other.result[2] != outcome.result[2]
    assert check_history(stamps, None, sim.history) is None


def test_ready_is_judged_at_the_logical_position_so_it_never_flips() -> None:
    def peek(ctx: Context, _: Any) -> list[Any]:
        signal = ctx.wait_signal("cancel")
        ctx.execute_operation("work", "1").result()
        if signal.ready:
            return ["cancelled"]
        ctx.execute_operation("more", "1").result()
        return ["done", signal.ready]

    sim = Sim(peek)
    sim.run_pass()
    sim.complete("op:1")
    sim.signal("cancel")  # after the first Operation's result: not visible when it is checked
    sim.run_pass()
    sim.complete("op:2")
    assert sim.run_pass() == Completed(["done", True], [])


def test_start_operation_runs_operations_concurrently() -> None:
    def fan_out(ctx: Context, _: Any) -> list[Any]:
        a = ctx.start_operation("quote", "1", "a")
        b = ctx.start_operation("quote", "1", "b")
        first = ctx.select(a, b)
        return [first, a.result(), b.result()]

    sim = Sim(fan_out)
    outcome = sim.run_pass()
    assert outcome == Parked(
        [
            ScheduleOperation("op:1", "quote", "1", "a", "wf-1:op:1"),
            ScheduleOperation("op:2", "quote", "1", "b", "wf-1:op:2"),
        ],
        None,
        ("op:1", "op:2"),
    )
    sim.complete("op:2", 20)
    assert sim.run_pass() == Parked(
        [RecordSelect("select:1", 1, ("op:1", "op:2"))], None, ("op:1",)
    )
    sim.complete("op:1", 10)
    assert sim.run_pass() == Completed([1, 10, 20], [])


def test_wake_at_is_the_earliest_unfired_timer() -> None:
    def timers(ctx: Context, _: Any) -> None:
        short = ctx.sleep(timedelta(seconds=30))
        ctx.sleep(timedelta(seconds=10))
        ctx.select(short, ctx.wait_signal("go"))

    outcome = replay(timers, None, [started()], workflow_id="wf-1", now_ms=T0 + 5)
    assert isinstance(outcome, Parked)
    assert outcome.wake_at_ms == T0 + 5 + 10_000
    assert outcome.commands == [
        StartTimer("timer:1", 30_000, T0 + 30_005),
        StartTimer("timer:2", 10_000, T0 + 10_005),
    ]


class CountingHistory(list[Event]):
    """Counts how often replay walks the history, to prove one pass reads it once."""

    walks = 0

    def __iter__(self) -> Iterator[Event]:
        CountingHistory.walks += 1
        return super().__iter__()

    def __getitem__(self, item: Any) -> Any:
        raise AssertionError("replay must not index history by position")


def test_a_long_workflow_reads_its_history_once_per_pass() -> None:
    def hundred(ctx: Context, _: Any) -> int:
        return sum(ctx.execute_operation("add", "1", i).result() for i in range(100))

    sim = Sim(hundred)
    assert sim.drive({"add": lambda i: i}) == Completed(4950, [])
    assert len(sim.history) == 202
    history = CountingHistory(sim.history)
    CountingHistory.walks = 0
    for _ in range(100):
        assert replay(hundred, None, history, workflow_id="wf-1") == Completed(4950, [])
    assert CountingHistory.walks == 100


def test_history_json_round_trip_and_check() -> None:
    history = recorded_charge_then_ship()
    text = history_to_json(
        history, name="checkout", version="1", workflow_id="wf-1", input={"id": 42}
    )
    document = json.loads(text)
    assert document["workflow"] == {
        "name": "checkout",
        "version": "1",
        "id": "wf-1",
        "input": {"id": 42},
    }
    assert document["events"][1] == {
        "seq": 2,
        "type": OPERATION_SCHEDULED,
        "payload": {
            "command_id": "op:1",
            "name": "charge",
            "version": "1",
            "input": {"id": 42},
            "execution_key": "wf-1:op:1",
        },
        "at_ms": T0,
    }
    export = history_from_json(text)
    assert export.events == history
    assert (export.name, export.version, export.workflow_id, export.run_id) == (
        "checkout",
        "1",
        "wf-1",
        None,
    )
    assert (
        check_history(charge_then_ship, export.input, export.events, workflow_id=export.workflow_id)
        is None
    )

    def skips_shipping(ctx: Context, order: Any) -> Any:
        return ctx.execute_operation("charge", "1", order).result()

    error = check_history(skips_shipping, export.input, export.events)
    assert isinstance(error, NondeterminismError)
    assert error.details == {"command_id": "op:2"}


@pytest.mark.parametrize(
    "document",
    [
        {"events": []},
        {"workflow": {"name": "w", "version": "1", "id": "x"}, "events": []},
        {"workflow": {"name": "w", "version": "1", "id": "x", "input": None}},
        {
            "workflow": {"name": "w", "version": "1", "id": "x", "input": None},
            "events": [{"seq": 1}],
        },
    ],
)
def test_a_malformed_export_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(HistoryCorruptError):
        history_from_json(json.dumps(document))


def test_workflow_code_cannot_break_the_pass() -> None:
    async def coroutine_workflow(ctx: Context, _: Any) -> None:
        return None

    outcome = replay(coroutine_workflow, None, [started()], workflow_id="wf-1")
    assert outcome == Failed("TypeError: a workflow function must not be async", [])

    def raises_unwind(ctx: Context, _: Any) -> None:
        raise ReplayUnwind()

    outcome = replay(raises_unwind, None, [started()], workflow_id="wf-1")
    assert outcome == Failed("ReplayUnwind: raised by workflow code", [])

    kept: list[Context] = []

    def keeps_context(ctx: Context, _: Any) -> str:
        kept.append(ctx)
        return "ok"

    assert replay(keeps_context, None, [started()], workflow_id="wf-1") == Completed("ok", [])
    with pytest.raises(RuntimeError, match="has ended"):
        kept[0].now()


def test_context_identity_and_utc_clock() -> None:
    def who(ctx: Context, _: Any) -> list[Any]:
        return [ctx.workflow_id, ctx.run_id, ctx.now()]

    outcome = replay(who, None, [started()], workflow_id="wf-9", run_id="run-3")
    assert outcome == Completed(["wf-9", "run-3", datetime(2026, 1, 1, tzinfo=UTC)], [])


def test_the_replay_modules_import_nothing_impure() -> None:
    allowed = {
        "__future__",
        "collections",
        "copy",
        "dataclasses",
        "datetime",
        "inspect",
        "json",
        "random",
        "typing",
        "uuid",
        "headgate_django",
    }
    kernel = Path(__file__).resolve().parents[2] / "headgate_django" / "kernel"
    for path in sorted(kernel.glob("replay*.py")):
        name = path.name
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
                if node.module and node.module.startswith("headgate_django"):
                    # backoff: the longest wait (MAX_WAIT); names: the ids reserved for
                    # schedules' ticks, which a child key may not take. Pure like replay.
                    assert node.module in (
                        "headgate_django.exceptions",
                        "headgate_django.kernel.backoff",
                        "headgate_django.kernel.names",
                    ) or (node.module.startswith("headgate_django.kernel.replay")), (
                        name,
                        node.module,
                    )
            else:
                continue
            assert roots <= allowed, (name, roots)
            assert all(
                root in sys.stdlib_module_names or root in {"__future__", "headgate_django"}
                for root in roots
            )

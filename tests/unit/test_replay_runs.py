"""Continue-as-new and patches in the pure replay engine (no database)."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest

from headgate_django.kernel.replay import Context, ReplayUnwind, replay
from headgate_django.kernel.replay_events import (
    OPERATION_COMPLETED,
    OPERATION_SCHEDULED,
    PATCH_RECORDED,
    SIGNAL_RECEIVED,
    WORKFLOW_COMPLETED,
    WORKFLOW_CONTINUED_AS_NEW,
    WORKFLOW_STARTED,
    Completed,
    ContinuedAsNew,
    Event,
    Nondeterministic,
    Outcome,
    Parked,
    RecordPatch,
)
from headgate_django.kernel.replay_runs import history_size_warning

T0 = 1_767_225_600_000


class Log:
    """A history built by hand, one event at a time."""

    def __init__(self, input: Any = None) -> None:
        self.events = [Event(1, WORKFLOW_STARTED, {"input": input}, T0)]

    def add(self, type_: str, **payload: Any) -> Log:
        seq = len(self.events) + 1
        self.events.append(Event(seq, type_, payload, T0 + seq))
        return self

    def op(self, n: int, name: str, result: Any = None) -> Log:
        cid = f"op:{n}"
        self.add(OPERATION_SCHEDULED, command_id=cid, name=name, version="1", input=None)
        return self.add(OPERATION_COMPLETED, command_id=cid, result=result)

    def signal(self, name: str, payload: Any = None) -> Log:
        return self.add(SIGNAL_RECEIVED, name=name, payload=payload)


def run(fn: Any, log: Log, input: Any = None) -> Outcome:
    return replay(fn, input, log.events, workflow_id="wf")


def error_of(outcome: Outcome) -> str:
    assert isinstance(outcome, Nondeterministic), outcome
    return str(outcome.error)


# -- continue-as-new -------------------------------------------------------------------


def test_continue_as_new_ends_the_pass_with_the_next_input_and_its_commands() -> None:
    def wf(ctx: Context, n: int) -> Any:
        ctx.execute_operation("step", "1", n).result()
        ctx.continue_as_new({"n": n + 1})

    outcome = run(wf, Log(1).op(1, "step"), 1)
    assert isinstance(outcome, ContinuedAsNew)
    assert outcome.input == {"n": 2}
    assert outcome.commands == []
    assert outcome.event_type == WORKFLOW_CONTINUED_AS_NEW
    assert outcome.event_payload() == {"input": {"n": 2}, "carried_signals": []}


def test_a_signal_is_consumed_when_its_bound_future_was_ready_at_the_decision() -> None:
    def wf(ctx: Context, _: Any) -> Any:
        first = ctx.wait_signal("cmd")
        ctx.select(first)  # waits up to the first "cmd": position moves to it
        ctx.wait_signal("cmd")  # bound to the second "cmd", which came after the position
        ctx.continue_as_new(None)

    log = Log().signal("cmd", 1).signal("cmd", 2).signal("other", 3).signal("cmd", 4)
    outcome = run(wf, log)
    assert isinstance(outcome, ContinuedAsNew)
    # seq 2 consumed; seq 3 (bound, not ready), 4 (never waited for), 5 (unbound) carried
    assert outcome.carried == (3, 4, 5)


def test_a_bound_signal_ready_at_the_position_is_consumed_even_if_never_read() -> None:
    def wf(ctx: Context, _: Any) -> Any:
        ctx.wait_signal("cmd")  # bound to seq 2 ...
        ctx.execute_operation("step", "1").result()  # ... and the position passes it
        ctx.continue_as_new(None)

    log = Log().signal("cmd").op(1, "step")
    outcome = run(wf, log)
    assert isinstance(outcome, ContinuedAsNew)
    assert outcome.carried == ()


def test_continue_as_new_cannot_be_swallowed() -> None:
    def wf(ctx: Context, _: Any) -> Any:
        with contextlib.suppress(BaseException):  # the point of the test
            ctx.continue_as_new(1)
        with pytest.raises(ReplayUnwind):
            ctx.sleep(timedelta(seconds=1))
        return "done"

    outcome = run(wf, Log())
    assert isinstance(outcome, ContinuedAsNew)
    assert outcome.input == 1


def test_a_recorded_continue_as_new_the_code_no_longer_reaches_is_nondeterminism() -> None:
    log = Log().op(1, "step").add(WORKFLOW_CONTINUED_AS_NEW, input=2, carried_signals=[])

    def returns(ctx: Context, _: Any) -> Any:
        return ctx.execute_operation("step", "1").result()

    def continues(ctx: Context, _: Any) -> Any:
        ctx.execute_operation("step", "1").result()
        ctx.continue_as_new(2)

    assert "History records WorkflowContinuedAsNew at seq 4, but the code now returns" in (
        error_of(run(returns, log))
    )
    assert isinstance(run(continues, log), ContinuedAsNew)
    completed = Log().op(1, "step").add(WORKFLOW_COMPLETED, result=None)
    assert "History records WorkflowCompleted at seq 4, but the code now continues as new" in (
        error_of(run(continues, completed))
    )


# -- patches ---------------------------------------------------------------------------


def patched_flow(ctx: Context, _: Any) -> Any:
    ctx.execute_operation("reserve", "1").result()
    if ctx.patched("notify-first"):
        ctx.execute_operation("notify", "1").result()
    return ctx.execute_operation("charge", "1").result()


def test_a_new_execution_takes_the_new_branch_and_records_the_marker_once() -> None:
    def twice(ctx: Context, _: Any) -> Any:
        return [ctx.patched("p"), ctx.patched("p")]

    outcome = run(twice, Log())
    assert isinstance(outcome, Completed)
    assert outcome.result == [True, True]
    assert outcome.commands == [RecordPatch("patch:p", "p")]
    assert outcome.commands[0].event_payload() == {"command_id": "patch:p", "patch_id": "p"}


def test_an_older_history_without_the_marker_runs_the_old_branch() -> None:
    old = Log().op(1, "reserve").op(2, "charge")  # recorded before the patch existed
    outcome = run(patched_flow, old)
    assert isinstance(outcome, Completed)
    assert outcome.commands == []


def test_a_finished_history_without_the_marker_runs_the_old_branch() -> None:
    def tail(ctx: Context, _: Any) -> Any:
        result = ctx.execute_operation("reserve", "1").result()
        return "new" if ctx.patched("tail") else result

    old = Log().op(1, "reserve", "old").add(WORKFLOW_COMPLETED, result="old")
    outcome = run(tail, old)
    assert isinstance(outcome, Completed) and outcome.result == "old"


def test_a_history_at_its_end_takes_the_new_branch() -> None:
    in_flight = Log().op(1, "reserve")  # parked before the patch point when code changed
    outcome = run(patched_flow, in_flight)
    assert isinstance(outcome, Parked)
    assert [c.command_id for c in outcome.commands] == ["patch:notify-first", "op:2"]
    assert outcome.commands[1].name == "notify"  # type: ignore[union-attr]


def test_a_history_with_the_marker_replays_the_new_branch() -> None:
    log = Log().op(1, "reserve")
    log.add(PATCH_RECORDED, command_id="patch:notify-first", patch_id="notify-first")
    log.op(2, "notify").op(3, "charge", "ok")
    assert isinstance(run(patched_flow, log), Completed)

    def without_patched(ctx: Context, _: Any) -> Any:
        ctx.execute_operation("reserve", "1").result()
        ctx.execute_operation("notify", "1").result()
        return ctx.execute_operation("charge", "1").result()

    assert "history has patch:notify-first (PatchRecorded(patch_id='notify-first') at seq 4)" in (
        error_of(run(without_patched, log))
    )


def test_deprecate_patch_accepts_histories_with_or_without_the_marker() -> None:
    def deprecated(ctx: Context, _: Any) -> Any:
        ctx.execute_operation("reserve", "1").result()
        ctx.deprecate_patch("notify-first")
        ctx.execute_operation("notify", "1").result()
        return ctx.execute_operation("charge", "1").result()

    marked = Log().op(1, "reserve")
    marked.add(PATCH_RECORDED, command_id="patch:notify-first", patch_id="notify-first")
    marked.op(2, "notify").op(3, "charge")
    unmarked = Log().op(1, "reserve").op(2, "notify").op(3, "charge")
    for log in (marked, unmarked):
        outcome = run(deprecated, log)
        assert isinstance(outcome, Completed) and outcome.commands == []
    fresh = run(deprecated, Log())
    assert isinstance(fresh, Parked) and [c.command_id for c in fresh.commands] == ["op:1"]


def test_a_marker_the_code_never_asks_for_is_nondeterminism() -> None:
    def gone(ctx: Context, _: Any) -> Any:
        return ctx.execute_operation("reserve", "1").result()

    log = Log().op(1, "reserve").add(PATCH_RECORDED, command_id="patch:x", patch_id="x")
    log.add(WORKFLOW_COMPLETED, result=None)
    assert "history has patch:x (PatchRecorded(patch_id='x') at seq 4)" in error_of(run(gone, log))


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_change_id_must_be_a_non_empty_string(bad: Any) -> None:
    def wf(ctx: Context, _: Any) -> Any:
        return ctx.patched(bad)

    outcome = run(wf, Log())
    assert not isinstance(outcome, Completed)
    assert "change id must be a non-empty string" in outcome.reason  # type: ignore[union-attr]


def test_a_marker_must_name_its_patch() -> None:
    log = Log().add(PATCH_RECORDED, command_id="patch:x", patch_id="y")
    assert "does not name its patch_id" in error_of(run(patched_flow, log))


def test_the_history_size_warning_names_the_run_and_the_thresholds() -> None:
    within = {"max_events": 10, "max_bytes": 100}
    assert history_size_warning(run_number=1, events=10, size=100, **within) is None
    by_events = history_size_warning(run_number=3, events=11, size=5, **within)
    assert by_events is not None and by_events.startswith("run 3 has 11 history events (5 bytes)")
    assert "past the threshold of 10 events or 100 bytes" in by_events
    assert "continue_as_new" in by_events
    assert history_size_warning(run_number=1, events=2, size=101, **within) is not None

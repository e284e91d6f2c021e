"""Durable timers on the store clock and ``select`` through the database (azync cases 18,
24, 37) and the two select hazards with the recommended outcome (cases 38, 39)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import durable, store, testing
from headgate_django.models import Job
from tests.durable.helpers import drive, history, start, task_job, types, view

pytestmark = pytest.mark.django_db

SHORT = timedelta(milliseconds=80)
NAP = timedelta(seconds=3)


def wait_for_timer(workflow_id: str) -> None:
    """Sleep until the newest timer of the execution is due and its task can run."""
    fire_at_ms = [p["fire_at_ms"] for t, p in history(workflow_id) if t == "TimerScheduled"][-1]
    task_due_ms = int(task_job(workflow_id).scheduled_at.timestamp() * 1000)
    while int(store.db_now().timestamp() * 1000) <= max(fire_at_ms, task_due_ms):
        time.sleep(0.01)


@durable.operation("sel-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("sel-sleep", version="1")
def sleeper(ctx: durable.Context, _: Any) -> Any:
    before = ctx.now()
    ctx.select(ctx.sleep(SHORT))
    return (ctx.now() - before) // timedelta(milliseconds=1)


@durable.workflow("sel-nap", version="1")
def napper(ctx: durable.Context, _: Any) -> Any:
    """Case 37's sleep: long enough that its second pass surely runs before it is due."""
    ctx.select(ctx.sleep(NAP))
    return "woke"


@durable.workflow("sel-edges", version="1")
def edges(ctx: durable.Context, case: str) -> Any:
    if case == "none":
        return ctx.select()
    if case == "several":
        a = ctx.execute_operation("sel-echo", "1", "a")
        b = ctx.execute_operation("sel-echo", "1", "b")
        return ctx.select(b, a)
    if case == "too-long":  # a unit mix-up: 10**8 days is past any date a database keeps
        return ctx.select(ctx.sleep(timedelta(days=10**8)))
    return ctx.select(ctx.wait_signal("never"), ctx.wait_signal("nor-this"))


@durable.workflow("sel-signal-wins", version="1")
def signal_then_more(ctx: durable.Context, _: Any) -> Any:
    """Case 38: the signal wins, then the code goes on; the losing timer must not matter."""
    go = ctx.wait_signal("go")
    branch = ctx.select(go, ctx.sleep(timedelta(hours=1)))
    after = ctx.execute_operation("sel-echo", "1", "after").result()
    ctx.select(ctx.sleep(SHORT))
    return [branch, go.result(), after]


@durable.workflow("sel-timer-wins", version="1")
def timer_then_op(ctx: durable.Context, _: Any) -> Any:
    """Case 39: the timer wins; a signal arriving later must not flip that decision."""
    signal = ctx.wait_signal("s")
    if ctx.select(signal, ctx.sleep(SHORT)) == 0:
        return ["signal", ctx.execute_operation("sel-echo", "1", "approve").result()]
    return ["timer", ctx.execute_operation("sel-echo", "1", "expire").result()]


def test_case_18_a_durable_sleep_parks_until_the_store_clock_passes_it() -> None:
    wf = start("sel-sleep")
    testing.run_one()
    assert types(wf) == ["WorkflowStarted", "TimerScheduled"]
    timer = history(wf)[1][1]
    assert timer["duration_ms"] == 80 and timer["command_id"] == "timer:1"
    job = task_job(wf)
    assert job.state == "scheduled"
    assert int(job.scheduled_at.timestamp() * 1000) >= timer["fire_at_ms"] - 5
    assert testing.run_jobs().outcomes == []  # nothing due before the timer
    assert view(wf).state == "running"
    wait_for_timer(wf)
    drive()
    assert types(wf) == [
        "WorkflowStarted",
        "TimerScheduled",
        "TimerFired",
        "SelectResolved",
        "WorkflowCompleted",
    ]
    assert view(wf).result >= 80  # ctx.now() moved to the timer's firing, on the store clock


def test_case_24_select_with_no_futures_fails_the_workflow() -> None:
    wf = start("sel-edges", "none")
    drive()
    row = view(wf)
    assert (row.state, row.failure_reason) == (
        "failed",
        "ValueError: select() needs at least one future",
    )


def test_a_sleep_past_the_longest_timer_fails_the_workflow_with_a_message() -> None:
    wf = start("sel-edges", "too-long")
    drive()
    row = view(wf)
    assert (row.state, row.failure_reason) == (
        "failed",
        "ValueError: sleep() takes at most 36500 days, not 100000000 days, 0:00:00",
    )
    assert task_job(wf).state == "completed"  # not a crashing task that leaves it running
    assert types(wf) == ["WorkflowStarted", "WorkflowFailed"]


def test_case_24_several_ready_futures_pick_the_lowest_index() -> None:
    wf = start("sel-edges", "several")
    drive()
    assert view(wf).result == 0


def test_case_24_select_on_signals_only_parks_without_a_timer() -> None:
    wf = start("sel-edges", "signals")
    drive()
    job = task_job(wf)
    assert job.state == "scheduled"
    assert job.scheduled_at > store.db_now() + timedelta(minutes=30)  # the long re-check only
    assert types(wf) == ["WorkflowStarted"]


def test_case_37_timer_fired_is_recorded_only_once_due() -> None:
    wf = start("sel-nap")
    testing.run_one()
    Job.objects.filter(pk=task_job(wf).pk).update(state="available")  # an early wake-up
    testing.run_one()
    assert "TimerFired" not in types(wf)
    assert types(wf).count("TimerScheduled") == 1  # replayed, not scheduled again
    wait_for_timer(wf)
    drive()
    assert types(wf).count("TimerFired") == 1


def test_case_38_work_after_a_won_select_replays_fine() -> None:
    wf = start("sel-signal-wins")
    drive()
    durable.Client().signal(wf, "go", "now")
    drive()
    wait_for_timer(wf)
    drive()
    row = view(wf)
    assert (row.state, row.result) == ("succeeded", [0, "now", "after"])


def first_pass(workflow_id: str) -> None:
    """Run exactly the first pass, which parks on the timer. (Not ``drive()``: on a slow
    machine the 80 ms timer is due before it returns, and it would run the rest too.)"""
    testing.run_one()
    assert types(workflow_id) == ["WorkflowStarted", "TimerScheduled"]


def test_case_39_a_late_signal_does_not_flip_an_earlier_select() -> None:
    wf = start("sel-timer-wins")
    first_pass(wf)
    wait_for_timer(wf)
    store.job_promote_due()
    testing.run_one()  # the timer fires and wins; the pass schedules "expire"
    assert types(wf)[-2:] == ["SelectResolved", "OperationScheduled"]
    durable.Client().signal(wf, "s", "too late")
    drive()
    assert view(wf).result == ["timer", "expire"]
    selects = [p for t, p in history(wf) if t == "SelectResolved"]
    assert [s["index"] for s in selects] == [1]


def test_a_timer_due_before_a_signal_wins_however_late_the_worker() -> None:
    wf = start("sel-timer-wins")
    first_pass(wf)
    wait_for_timer(wf)
    # No pass ran since the timer became due; the signal is recorded after its firing.
    durable.Client().signal(wf, "s", "after the timer")
    assert types(wf)[-2:] == ["TimerFired", "SignalReceived"]
    drive()
    assert view(wf).result == ["timer", "expire"]

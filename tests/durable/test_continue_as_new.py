"""Continue-as-new through the database: fresh runs of one execution, the chain of runs,
signals carried over, the history-size warning, and bad input (a clear failure, no new run)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import NotFoundError, durable, testing
from headgate_django.durable import eager
from headgate_django.exceptions import InvalidTransitionError
from headgate_django.kernel.replay_events import history_from_json
from headgate_django.models import ExecutionRun, Job, RunHistoryEvent
from headgate_django.store import db_now
from headgate_django.store import durable as store
from headgate_django.store.durable_jobs import OP_KIND
from tests.durable.helpers import drive, history, start, task_job, types, view

pytestmark = pytest.mark.django_db


@durable.operation("can-step", version="1")
def step(ctx: Any, n: int) -> int:
    return n + 1


@durable.workflow("can-loop", version="1")
def loop(ctx: durable.Context, state: dict[str, int]) -> Any:
    """``total`` iterations, continuing as new every ``every``."""
    i = state["i"]
    for _ in range(state["every"]):
        if i == state["total"]:
            return i
        i = ctx.execute_operation("can-step", "1", i).result()
    ctx.continue_as_new({**state, "i": i})


@durable.workflow("can-signals", version="1")
def signals(ctx: durable.Context, run: int) -> Any:
    first = ctx.wait_signal("cmd")
    ctx.select(first)
    if run == 1:
        ctx.wait_signal("cmd")  # bound to the second "cmd", which has not come yet
        ctx.continue_as_new(2)
    second = ctx.wait_signal("cmd")
    ctx.select(second)
    return [first.result(), second.result()]


@durable.workflow("can-bad-input", version="1")
def bad_input(ctx: durable.Context, kind: str) -> Any:
    ctx.execute_operation("can-step", "1", 0).result()
    ctx.continue_as_new({1, 2} if kind == "set" else "x" * 2000)


@durable.operation("can-left-behind", version="1")
def left_behind(ctx: Any, _: Any) -> str:
    return "from the old run"


@durable.workflow("can-abandons", version="1")
def abandons(ctx: durable.Context, run: int) -> Any:
    if run == 1:
        ctx.start_operation("can-left-behind", "1")  # never awaited
        ctx.continue_as_new(2)
    return ctx.execute_operation("can-step", "1", 41).result()


@durable.operation("can-unsure", version="1")
def unsure(ctx: Any, _: Any) -> str:
    raise durable.Uncertain("no answer")


@durable.workflow("can-leaves-unsure", version="1")
def leaves_unsure(ctx: durable.Context, run: int) -> Any:
    if run == 1:
        ctx.start_operation("can-unsure", "1")  # never awaited; it turns uncertain later
        ctx.continue_as_new(2)
    ctx.select(ctx.wait_signal("go"))
    return "done"


def test_a_loop_runs_in_fresh_runs_of_one_execution() -> None:
    wf = start("can-loop", {"i": 0, "total": 7, "every": 3})
    drive()
    done = view(wf)
    assert (done.state, done.result, done.run_number) == ("succeeded", 7, 3)
    assert [r.number for r in done.runs] == [1, 2, 3]
    assert [r.current for r in done.runs] == [False, False, True]
    assert done.runs[0].run_id == wf  # the first run has the execution's id
    assert done.runs[-1].run_id == done.run_id != wf
    assert len({r.run_id for r in done.runs}) == 3
    # each finished run: WorkflowStarted, 3 × (scheduled, completed), WorkflowContinuedAsNew
    assert [r.events for r in done.runs[:2]] == [8, 8]
    assert done.runs[0].finished_at == done.runs[1].started_at
    # the current history is the last run's alone, starting again at seq 1
    assert types(wf) == [
        "WorkflowStarted",
        "OperationScheduled",
        "OperationCompleted",
        "WorkflowCompleted",
    ]
    started = history(wf)[0][1]
    assert started["input"] == {"i": 6, "total": 7, "every": 3}
    assert started["continued_from"] == done.runs[1].run_id
    assert done.input == {"i": 6, "total": 7, "every": 3}
    assert done.history_length == 4 and done.history_warning == ""
    # every run schedules its own Operation jobs
    ops = sorted(Job.objects.filter(kind=OP_KIND).values_list("id", flat=True))
    assert len(ops) == 7 and {o.rsplit(":op:", 1)[0] for o in ops} == {r.run_id for r in done.runs}


def test_the_history_of_a_finished_run_is_reachable_and_replays() -> None:
    wf = start("can-loop", {"i": 0, "total": 4, "every": 2})
    drive()
    first, second, current = view(wf).runs
    exported = durable.Manager().history(wf, first.run_id)
    parsed = history_from_json(exported)
    assert parsed.run_id is None  # the first run's id is the execution's: not repeated
    assert parsed.input == {"i": 0, "total": 4, "every": 2}
    assert [e.type for e in parsed.events][-1] == "WorkflowContinuedAsNew"
    ended = parsed.events[-1].payload
    assert ended["input"] == {"i": 2, "total": 4, "every": 2}
    assert ended["next_run_id"] == second.run_id and ended["carried_signals"] == []
    durable.replay(exported)  # the current code reproduces the finished run
    middle = history_from_json(durable.Manager().history(wf, second.run_id))
    assert middle.run_id == second.run_id and middle.events[0].seq == 1
    assert durable.Manager().history(wf) == durable.Manager().history(wf, current.run_id)
    with pytest.raises(NotFoundError, match="has no finished run nope"):
        durable.Manager().history(wf, "nope")


def test_unconsumed_signals_carry_over_into_the_new_run() -> None:
    wf = start("can-signals", 1)
    client = durable.Client()
    for n in (1, 2):
        client.signal(wf, "cmd", f"s{n}")
    client.signal(wf, "other", "never waited for")
    drive()
    # run 1 consumed s1 (its select waited for it); s2 was bound to a wait whose future had
    # not settled at the decision, so it is carried, and so is the signal nobody waited for
    first = view(wf).runs[0]
    ended = history_from_json(durable.Manager().history(wf, first.run_id)).events[-1]
    assert ended.payload["carried_signals"] == [3, 4]
    assert history(wf)[1:3] == [
        ("SignalReceived", {"name": "cmd", "payload": "s2"}),
        ("SignalReceived", {"name": "other", "payload": "never waited for"}),
    ]
    assert view(wf).state == "running"
    client.signal(wf, "cmd", "s3")  # a signal after the new run started goes to it
    drive()
    done = view(wf)
    assert (done.state, done.result) == ("succeeded", ["s2", "s3"])


def test_an_operation_of_an_ended_run_never_settles_the_new_one() -> None:
    wf = start("can-abandons", 1)
    drive()
    done = view(wf)
    assert (done.state, done.result) == ("succeeded", 42)
    old = Job.objects.get(pk=f"{wf}:op:1")
    assert old.state == "completed"  # it ran, but nothing waited for its outcome
    assert [t for t, p in history(wf) if t == "OperationCompleted"] == ["OperationCompleted"]
    assert history(wf)[2][1]["result"] == 42


def test_an_ended_run_s_uncertain_operation_neither_suspends_nor_touches_the_new_run() -> None:
    wf = start("can-leaves-unsure", 1)
    drive()
    assert Job.objects.get(pk=f"{wf}:op:1").state == "archived"  # it ran, and was unsure
    running = view(wf)
    assert (running.state, running.run_number) == ("running", 2)
    assert types(wf) == ["WorkflowStarted"]  # nothing of the old Operation landed here
    with pytest.raises(InvalidTransitionError, match=r"belongs to a run .* that has ended"):
        durable.Manager().resolve_uncertain(f"{wf}:op:1", "complete", "paid")
    durable.Client().signal(wf, "go")
    drive()
    assert view(wf).result == "done"


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("set", "PayloadNotJSONError: payload is not JSON-serialisable"),
        ("large", "the input of continue_as_new is 2002 bytes, over the 1000-byte limit"),
    ],
)
def test_bad_next_input_fails_the_run_and_starts_nothing(
    settings: Any, kind: str, reason: str
) -> None:
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    wf = start("can-bad-input", kind)
    drive()
    failed = view(wf)
    assert failed.state == "failed" and reason in failed.failure_reason
    assert failed.run_number == 1 and len(failed.runs) == 1
    assert ExecutionRun.objects.count() == 0 and RunHistoryEvent.objects.count() == 0
    assert types(wf) == [
        "WorkflowStarted",
        "OperationScheduled",
        "OperationCompleted",
        "WorkflowFailed",
    ]


def test_a_run_past_the_history_threshold_warns_once(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.HEADGATE = {"DURABLE_HISTORY_WARN_EVENTS": 4}
    wf = start("can-loop", {"i": 0, "total": 6, "every": 3})
    with caplog.at_level(logging.WARNING, logger="headgate_django.durable"):
        drive()
    warnings = [r.getMessage() for r in caplog.records if "past the threshold" in r.getMessage()]
    # runs 1 and 2 each pass 4 events once; run 3 ends at 4 events and never warns
    assert len(warnings) == 2
    # (how many events past 4 depends on whether the Operations ran eagerly)
    assert warnings[0].startswith(f"execution {wf}: run 1 has ")
    assert "past the threshold of 4 events" in warnings[0] and "continue_as_new" in warnings[0]
    assert warnings[1].startswith(f"execution {wf}: run 2 has ")
    assert view(wf).history_warning == ""


def test_the_byte_threshold_is_visible_on_the_execution(settings: Any) -> None:
    settings.HEADGATE = {"DURABLE_HISTORY_WARN_BYTES": 100}
    wf = start("can-signals", 1)
    durable.Client().signal(wf, "cmd", "small")
    drive()
    assert view(wf).run_number == 2
    durable.Client().signal(wf, "cmd", "x" * 200)
    drive()
    warning = view(wf).history_warning
    assert warning.startswith(
        "run 2 has "
    ) and "past the threshold of 10000 events or 100 bytes" in (warning)


def test_a_long_loop_keeps_every_run_under_the_threshold(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The acceptance loop scaled down (the benchmark runs 10,000 iterations by 500): each
    run holds 2 + 2 × 20 events, under a threshold of 50; the same loop in one run passes it."""
    settings.HEADGATE = {"DURABLE_HISTORY_WARN_EVENTS": 50}
    with caplog.at_level(logging.WARNING, logger="headgate_django.durable"):
        looped = start("can-loop", {"i": 0, "total": 200, "every": 20})
        drive()
        assert not [r for r in caplog.records if "past the threshold" in r.getMessage()]
        once = start("can-loop", {"i": 0, "total": 200, "every": 201})
        drive()
    done = view(looped)
    assert (done.state, done.result, len(done.runs)) == ("succeeded", 200, 11)
    assert max(r.events for r in done.runs) == 42 and done.history_warning == ""
    single = view(once)
    assert (single.result, len(single.runs), single.history_length) == (200, 1, 402)
    assert single.history_warning.startswith("run 1 has ")
    warned = [r for r in caplog.records if "past the threshold" in r.getMessage()]
    assert len(warned) == 1 and once in warned[0].getMessage()


def test_retention_deletes_the_finished_runs_with_the_execution() -> None:
    wf = start("can-loop", {"i": 0, "total": 2, "every": 1})
    drive()
    assert view(wf).state == "succeeded" and ExecutionRun.objects.count() == 2
    assert store.execution_vacuum(older_than=timedelta(0), limit=100) == [wf]
    assert ExecutionRun.objects.count() == 0 and RunHistoryEvent.objects.count() == 0


@durable.workflow("can-lives-on", version="1")
def lives_on(ctx: durable.Context, run: int) -> Any:
    if run < 4:
        ctx.continue_as_new(run + 1)
    ctx.select(ctx.wait_signal("stop"))
    return run


def test_the_runs_a_live_execution_ended_are_pruned_after_retention(settings: Any) -> None:
    """A workflow that continues as new for ever is never finished, so the vacuum of
    finished executions never reaches it: each ended run is pruned on its own, once it
    ended more than the retention ago, and the execution goes on."""
    from headgate_django.durable import duties

    wf = start("can-lives-on", 1)
    drive()
    before = view(wf)
    assert (before.state, before.run_number, len(before.runs)) == ("running", 4, 4)
    old = [r.run_id for r in before.runs[:2]]
    ExecutionRun.objects.filter(run_id__in=old).update(finished_at=db_now() - timedelta(days=31))
    settings.HEADGATE = {"DURABLE_RETENTION": timedelta(days=30)}
    assert duties.vacuum() == {"deleted": 0, "runs": 2, "more": False}
    kept = view(wf)
    assert [r.number for r in kept.runs] == [3, 4] and kept.state == "running"
    assert not RunHistoryEvent.objects.filter(run__run_id__in=old).exists()
    assert RunHistoryEvent.objects.filter(run__run_id=kept.runs[0].run_id).exists()
    with pytest.raises(NotFoundError):
        durable.Manager().history(wf, run_id=old[0])
    durable.Client().signal(wf, "stop", None)
    drive()
    assert (view(wf).state, view(wf).result) == ("succeeded", 4)


@durable.workflow("can-restless", version="1")
def restless(ctx: durable.Context, run: int) -> Any:
    if run < 50:
        ctx.continue_as_new(run + 1)  # never waits for anything
    return run


def test_runs_that_never_wait_give_the_thread_back_after_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(eager, "EAGER_BUDGET", timedelta(0))
    wf = start("can-restless", 1)
    testing.run_one()  # one claim of the workflow task: one run, then it yields
    assert view(wf).run_number == 2 and task_job(wf).state == "scheduled"
    drive(tasks_due=True)
    assert (view(wf).state, view(wf).result, view(wf).run_number) == ("succeeded", 50, 50)

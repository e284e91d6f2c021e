"""Failures of the workflow and of replay, through the database (azync cases 25–31): a
business failure, a worker lacking the code, replay errors retried then suspended, and
recovery by resume."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from headgate_django import durable, store, testing
from headgate_django.durable.history_cache import histories
from headgate_django.durable.registry import WorkflowDef
from headgate_django.exceptions import InvalidTransitionError, NotFoundError
from headgate_django.models import HistoryEvent, Job
from headgate_django.store.durable_history import NewEvent, history_append
from headgate_django.store.durable_jobs import TASK_KIND
from tests.durable.helpers import (
    REFUSED,
    drive,
    history,
    live_jobs,
    op_job,
    op_jobs,
    refusing_operation_failure,
    replay_until_suspended,
    start,
    task_job,
    types,
    view,
)

pytestmark = pytest.mark.django_db


@durable.operation("fail-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("fail-raises", version="1")
def raises(ctx: durable.Context, _: Any) -> Any:
    raise ValueError("the order is invalid")


@durable.workflow("fail-op-then-sleep", version="1")
def op_then_sleep(ctx: durable.Context, _: Any) -> Any:
    value = ctx.execute_operation("fail-echo", "1", "v").result()
    ctx.select(ctx.sleep(timedelta(milliseconds=1)))
    return value


@durable.workflow("fail-op-then-wait", version="1")
def op_then_wait(ctx: durable.Context, _: Any) -> Any:
    ctx.execute_operation("fail-echo", "1", "v").result()
    ctx.select(ctx.wait_signal("go"))


@durable.workflow("fail-unregistered-op", version="1")
def uses_missing_op(ctx: durable.Context, _: Any) -> Any:
    return ctx.execute_operation("fail-later", "1", "x").result()


@durable.workflow("fail-versioned", version="2")
def versioned(ctx: durable.Context, _: Any) -> Any:
    return "v2"


def sleep_first(ctx: durable.Context, _: Any) -> Any:
    """``fail-op-then-sleep`` after a bad deploy: it sleeps where history has an Operation."""
    ctx.select(ctx.sleep(timedelta(milliseconds=1)))
    return ctx.execute_operation("fail-echo", "1", "v").result()


def test_case_25_a_workflow_that_raises_fails_without_retry() -> None:
    wf = start("fail-raises")
    outcomes = drive()
    assert outcomes == [(f"{wf}:task", "completed")]
    row = view(wf)
    assert (row.state, row.failure_reason) == ("failed", "ValueError: the order is invalid")
    assert history(wf)[-1] == ("WorkflowFailed", {"reason": "ValueError: the order is invalid"})
    assert task_job(wf).attempt == 0


def test_case_26_a_worker_lacking_the_version_leaves_the_task(
    swap_code: Any, caplog: pytest.LogCaptureFixture
) -> None:
    wf = start("fail-versioned", version="2")
    swap_code("workflow", "fail-versioned", "2", None)  # this worker was deployed without v2
    with caplog.at_level(logging.WARNING, logger="headgate_django.durable"):
        assert testing.run_jobs().outcomes == [(f"{wf}:task", "snoozed")]
    assert "needs workflow 'fail-versioned' version '2'" in caplog.text
    assert "leaving its task for a worker that does" in caplog.text
    assert (view(wf).state, task_job(wf).state, task_job(wf).attempt) == (
        "running",
        "scheduled",
        0,
    )
    swap_code("workflow", "fail-versioned", "2", versioned)  # a worker that has it
    drive(tasks_due=True)
    assert view(wf).result == "v2"


def test_case_27_an_operation_no_worker_has_yet_waits_for_one(
    swap_code: Any, caplog: pytest.LogCaptureFixture
) -> None:
    wf = start("fail-unregistered-op")
    with caplog.at_level(logging.WARNING, logger="headgate_django.durable"):
        testing.run_jobs()
    assert "needs operation 'fail-later' version '1'" in caplog.text
    (job,) = op_jobs(wf)
    assert (job.state, job.attempt) == ("scheduled", 0)
    assert types(wf) == ["WorkflowStarted", "OperationScheduled"]
    swap_code(
        "operation",
        "fail-later",
        "1",
        durable.OperationDef(lambda ctx, x: x * 2, "fail-later", "1"),
    )
    drive()
    assert view(wf).result == "xx"


@pytest.mark.parametrize("budget", [None, 2])
def test_case_28_a_corrupt_history_is_retried_with_backoff_then_suspended(
    settings: Any, budget: int | None
) -> None:
    if budget is not None:
        settings.HEADGATE = {"DURABLE_TASK_ATTEMPTS": budget}
    wf = start("fail-op-then-wait")
    drive()  # the Operation ran; the workflow waits for a signal
    last = view(wf).history_length
    history_append(wf, expected_seq=last, events=[NewEvent("OperationCompleted", {"no": "id"})])
    Job.objects.filter(kind=TASK_KIND).update(state="available")
    testing.run_one()
    job = task_job(wf)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert job.scheduled_at > store.db_now() - timedelta(seconds=1)
    assert "HistoryCorruptError" in job.errors[-1]["error"]
    assert view(wf).state == "running"
    replay_until_suspended(wf)
    reason = view(wf).suspended_reason
    assert reason.startswith(f"replay failed after {budget or 5} attempts: History event")
    assert task_job(wf).state == "scheduled"  # kept for resume, not failed
    assert history(wf)[-1] == ("WorkflowSuspended", {"reason": reason})


def test_case_29_and_30_nondeterminism_suspends_then_fixed_code_resumes(swap_code: Any) -> None:
    wf = start("fail-op-then-sleep")
    testing.run_one()  # history: Started, OperationScheduled(op:1)
    swap_code(
        "workflow", "fail-op-then-sleep", "1", WorkflowDef(sleep_first, "fail-op-then-sleep", "1")
    )
    replay_until_suspended(wf)
    reason = view(wf).suspended_reason
    assert "timer:1: the code issues a new command while history still expects op:1" in reason
    assert "TimerScheduled" not in types(wf)  # a diverging pass records nothing

    swap_code("workflow", "fail-op-then-sleep", "1", op_then_sleep)  # the fix is deployed
    durable.Manager().resume(wf)
    row = view(wf)
    assert (row.state, row.suspended_reason) == ("running", "")
    assert [j.state for j in live_jobs(wf) if j.kind == TASK_KIND] == ["available"]
    assert task_job(wf).attempt == 0  # a fresh replay budget
    drive(tasks_due=True)  # the Operation, then the 1 ms timer
    assert view(wf).result == "v"


def test_case_30_resume_and_suspend_refuse_the_wrong_state() -> None:
    manager = durable.Manager()
    wf = start("fail-raises")
    with pytest.raises(InvalidTransitionError, match="only a suspended execution"):
        manager.resume(wf)
    drive()
    with pytest.raises(InvalidTransitionError):
        manager.resume(wf)
    with pytest.raises(InvalidTransitionError):
        manager.suspend(wf)
    with pytest.raises(NotFoundError):
        manager.resume("missing")
    with pytest.raises(NotFoundError):
        manager.suspend("missing")


def test_case_31_a_task_arriving_while_suspended_is_consumed_without_replay() -> None:
    wf = start("fail-op-then-sleep")
    durable.Manager().suspend(wf, "provider outage")
    assert testing.run_jobs().outcomes == [(f"{wf}:task", "snoozed")]
    assert types(wf) == ["WorkflowStarted", "WorkflowSuspended"]
    assert (view(wf).state, view(wf).suspended_reason) == ("suspended", "provider outage")
    durable.Manager().resume(wf)
    assert len([j for j in live_jobs(wf) if j.kind == TASK_KIND]) == 1
    drive(tasks_due=True)  # the Operation, then the 1 ms timer
    assert view(wf).result == "v"


@durable.workflow("fail-bad-input", version="1")
def bad_operation_input(ctx: durable.Context, size: int) -> Any:
    value: Any = object() if size < 0 else "x" * size
    return ctx.execute_operation("fail-echo", "1", value).result()


@durable.workflow("fail-bad-result", version="1")
def bad_result(ctx: durable.Context, _: Any) -> Any:
    return {1, 2}


@durable.workflow("fail-big-result", version="1")
def big_result(ctx: durable.Context, size: int) -> Any:
    return "x" * size


def test_what_cannot_be_stored_fails_the_workflow(settings: Any) -> None:
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    not_json, too_big, bad = (
        start("fail-bad-input", -1),
        start("fail-bad-input", 5000),
        start("fail-bad-result"),
    )
    drive()
    assert view(not_json).failure_reason.startswith("PayloadNotJSONError: payload is not JSON")
    assert view(too_big).failure_reason.startswith("PayloadTooLargeError: the input of op:1")
    assert view(bad).failure_reason.startswith("PayloadNotJSONError: payload is not JSON")
    assert op_jobs(not_json) == op_jobs(too_big) == []


def test_a_result_over_the_result_limit_fails_the_workflow(settings: Any) -> None:
    """As an Operation's result and an update's: the limit that keeps a result storable
    (MariaDB refuses a statement over its max_allowed_packet, 16 MiB by default, and the pass
    that tried crashed on every attempt, leaving the execution running with no task)."""
    settings.HEADGATE = {"MAX_RESULT_BYTES": 1000}
    too_big, fits = start("fail-big-result", 2000), start("fail-big-result", 900)
    drive()
    assert (view(too_big).state, view(too_big).failure_reason) == (
        "failed",
        "ResultTooLargeError: result is 2002 bytes, over the 1000-byte limit "
        "(HEADGATE['MAX_RESULT_BYTES'])",
    )
    assert view(too_big).result is None
    assert types(too_big) == ["WorkflowStarted", "WorkflowFailed"]
    assert (view(fits).state, len(view(fits).result)) == ("succeeded", 900)


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


UNKEEPABLE = {"nul": {"name": "a\x00b"}, "deep": _nested(40)}


@durable.workflow("fail-unkeepable-result", version="1")
def unkeepable_result(ctx: durable.Context, kind: str) -> Any:
    ctx.wait_signal("go").result()
    return UNKEEPABLE[kind]


@unkeepable_result.update("unkeepable")
def unkeepable_update(ctx: durable.Context, kind: str) -> Any:
    return UNKEEPABLE[kind]


@pytest.mark.parametrize(
    ("kind", "why"),
    [("nul", "a NUL character"), ("deep", "nests lists and objects deeper than 24 levels")],
)
def test_a_result_no_database_can_keep_fails_the_update_or_the_workflow_at_once(
    kind: str, why: str
) -> None:
    # The pass crashed on every attempt (with the job backoff, up to an hour apart), then
    # suspended the execution: an update's caller waited for nothing, and a workflow that
    # returned such a value never failed.
    wf = start("fail-unkeepable-result", kind)
    drive()
    sent = durable.Manager().update(wf, "unkeepable", kind, wait=False)
    drive()
    update = durable.Manager().get_update(wf, sent.update_id)
    assert update.state == "failed" and why in str(update.error)
    assert view(wf).state == "running"
    durable.Client().signal(wf, "go")
    drive()
    assert view(wf).state == "failed" and why in view(wf).failure_reason
    assert types(wf)[-1] == "WorkflowFailed"


@durable.workflow("fail-kid", version="1")
def kid(ctx: durable.Context, value: Any) -> Any:
    return value


@durable.workflow("fail-nul-input", version="1")
def nul_input(ctx: durable.Context, where: str) -> Any:
    value = {"note": "a\x00b"}
    if where == "operation":
        return ctx.execute_operation("fail-echo", "1", value).result()
    if where == "child":
        return ctx.child("fail-kid", value, version="1")
    ctx.continue_as_new(value)


@pytest.mark.parametrize(
    ("where", "what"),
    [
        ("operation", "input of op:1 (fail-echo)"),
        ("child", "input of child child:1 (fail-kid)"),
        ("continue_as_new", "input of continue_as_new"),
    ],
)
def test_a_nul_character_in_what_the_code_hands_over_fails_the_workflow(
    where: str, what: str
) -> None:
    # PostgreSQL refused it at the pass's commit, on every attempt of the workflow task
    # (then suspended the execution); SQLite and MariaDB kept it.
    wf = start("fail-nul-input", where)
    drive()
    assert (view(wf).state, view(wf).failure_reason) == (
        "failed",
        f"PayloadError: the {what} holds a string with a NUL character (U+0000), which "
        "the database cannot store",
    )
    assert types(wf) == ["WorkflowStarted", "WorkflowFailed"]
    assert op_jobs(wf) == []


class _Halt(BaseException):
    """Neither an ``Exception`` nor process control: a library's own "stop" signal."""


# Not Exceptions, so they escape replay (the pass itself fails) and an Operation's own
# failure handling. Raised by workflow code, all but SystemExit left the task archived and
# the execution running, with no reason shown; raised by an Operation, they were retried by
# the job table's MAX_ATTEMPTS (25) and backoff instead of the Operation's max_attempts.
_BASE_EXCEPTIONS = {
    "SystemExit": SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt("ctrl-c"),
    "GeneratorExit": GeneratorExit("closed"),
    "_Halt": _Halt("stop"),
}
#: Each of them, with the error it is recorded as.
RAISED_AND_ERROR = pytest.mark.parametrize(
    ("raised", "error"),
    [
        ("SystemExit", "SystemExit: 3"),
        ("KeyboardInterrupt", "KeyboardInterrupt: ctrl-c"),
        ("GeneratorExit", "GeneratorExit: closed"),
        ("_Halt", "_Halt: stop"),
    ],
)


@durable.workflow("fail-exits", version="1")
def exits(ctx: durable.Context, raised: str) -> Any:
    raise _BASE_EXCEPTIONS[raised]


@RAISED_AND_ERROR
def test_a_pass_failing_on_every_attempt_suspends_the_execution_with_the_error(
    settings: Any, swap_code: Any, raised: str, error: str
) -> None:
    settings.HEADGATE = {
        "DURABLE_TASK_ATTEMPTS": 3,
        "BACKOFF_BASE": timedelta(milliseconds=1),
        "BACKOFF_CAP": timedelta(milliseconds=5),
    }
    wf = start("fail-exits", raised)
    replay_until_suspended(wf)
    row = view(wf)
    assert row.suspended_reason == f"the workflow task failed 3 times: {error}"
    assert task_job(wf).state == "scheduled"  # waits for resume, as after a replay error
    assert [e["error"] for e in task_job(wf).errors] == [error] * 2
    # The last attempt's traceback is kept with the suspension, down to the line of the
    # workflow code that raised (the earlier ones are in the task's errors).
    event, payload = history(wf)[-1]
    assert (event, payload["reason"]) == ("WorkflowSuspended", row.suspended_reason)
    assert payload["traceback"].startswith("Traceback (most recent call last):")
    assert ", in exits\n    raise _BASE_EXCEPTIONS[raised]\n" in payload["traceback"]
    assert payload["traceback"].endswith(f"{error}\n")
    assert "Traceback (most recent call last):" in task_job(wf).errors[-1]["traceback"]
    swap_code(
        "workflow", "fail-exits", "1", durable.workflow("fail-exits-fixed")(lambda c, i: "ok")
    )
    durable.Manager().resume(wf)
    drive()
    assert (view(wf).state, view(wf).result) == ("succeeded", "ok")


def test_a_pass_failing_on_every_attempt_is_suspended_after_five_not_max_attempts(
    fast_retries: None,
) -> None:
    """A bug in workflow code is an operator's to see at once: it was retried on the job
    table's MAX_ATTEMPTS (25, over about 13 hours of backoff) before the suspension."""
    wf = start("fail-exits", "_Halt")
    replay_until_suspended(wf)
    assert view(wf).suspended_reason == "the workflow task failed 5 times: _Halt: stop"
    assert len(task_job(wf).errors) == 4


@durable.workflow("fail-exits-nul", version="1")
def exits_nul(ctx: durable.Context, _: Any) -> Any:
    raise _Halt("a\x00b")


def test_a_pass_failing_with_a_nul_in_its_error_is_still_suspended(settings: Any) -> None:
    """PostgreSQL refused the NUL in the suspension's reason: the execution was never
    suspended, and its task was archived at MAX_ATTEMPTS, failing it."""
    settings.HEADGATE = {"MAX_ATTEMPTS": 2, "BACKOFF_BASE": timedelta(milliseconds=1)}
    wf = start("fail-exits-nul")
    replay_until_suspended(wf)
    assert view(wf).suspended_reason == "the workflow task failed 2 times: _Halt: a\ufffdb"
    assert history(wf)[-1][1]["traceback"].endswith("_Halt: a\ufffdb\n")


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


@durable.workflow("fail-unprintable", version="1")
def unprintable(ctx: durable.Context, _: Any) -> Any:
    raise _Unprintable()


def test_an_exception_without_a_printable_message_still_fails_the_workflow() -> None:
    wf = start("fail-unprintable")
    drive()
    row = view(wf)
    assert (row.state, row.failure_reason) == ("failed", "_Unprintable: <unprintable message>")
    assert task_job(wf).state == "completed"


@durable.operation("fail-unprintable-op", version="1", max_attempts=2)
def unprintable_op(ctx: Any, _: Any) -> Any:
    raise _Unprintable()


@durable.workflow("fail-unprintable-op", version="1")
def calls_unprintable_op(ctx: durable.Context, _: Any) -> Any:
    return ctx.execute_operation("fail-unprintable-op", "1", None).result()


def test_an_operation_raising_an_unprintable_exception_keeps_its_own_attempts(
    fast_retries: None,
) -> None:
    wf = start("fail-unprintable-op")
    drive()
    # Its own max_attempts (2), not the job table's 25 (the Operation's failure handling
    # crashed formatting the message, and the job fell back to the generic retry).
    assert len(op_jobs(wf)[0].errors) == 2
    assert view(wf).failure_reason == (
        "OperationFailedError: _Unprintable: <unprintable message> (after 2 attempt(s))"
    )


@durable.operation("fail-exiting-op", version="1", max_attempts=2)
def exiting_op(ctx: Any, raised: str) -> Any:
    raise _BASE_EXCEPTIONS[raised]


@durable.workflow("fail-exiting-op", version="1")
def calls_exiting_op(ctx: durable.Context, raised: str) -> Any:
    return ctx.execute_operation("fail-exiting-op", "1", raised).result()


@RAISED_AND_ERROR
def test_an_operation_raising_a_base_exception_keeps_its_own_attempts(
    fast_retries: None, raised: str, error: str
) -> None:
    wf = start("fail-exiting-op", raised)
    drive()
    assert len(op_jobs(wf)[0].errors) == 2  # its max_attempts, not the job table's 25
    assert view(wf).failure_reason == f"OperationFailedError: {error} (after 2 attempt(s))"


def test_a_replay_error_suspends_even_when_max_attempts_is_below_the_replay_budget(
    settings: Any, swap_code: Any
) -> None:
    """HEADGATE['MAX_ATTEMPTS'] = 3 archived the task at its third replay error, before the
    fifth that suspends: the execution stayed running, with no reason and no task."""
    settings.HEADGATE = {"MAX_ATTEMPTS": 3}
    wf = start("fail-op-then-sleep")
    testing.run_one()  # history: Started, OperationScheduled(op:1)
    swap_code(
        "workflow", "fail-op-then-sleep", "1", WorkflowDef(sleep_first, "fail-op-then-sleep", "1")
    )
    for _ in range(5):
        testing.run_jobs()
        Job.objects.filter(kind=TASK_KIND, state="retryable").update(state="available")
    assert view(wf).state == "suspended"
    assert view(wf).suspended_reason.startswith("replay failed after 3 attempts: timer:1:")
    assert task_job(wf).state == "scheduled"  # kept for resume, not archived


def _write_raw_payload(wf: str, seq: int, text: str) -> None:
    """Store ``text`` as history event ``seq``'s payload, as written by another program."""
    value = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE headgate_durable_history SET payload = {value} "
            "WHERE execution_id = %s AND seq = %s",
            [text, wf, seq],
        )


def test_a_history_event_the_task_cannot_decode_suspends_the_execution(
    settings: Any,
) -> None:
    """Reading the history comes before the replay pass: an event every attempt failed to
    decode was retried on the job table's MAX_ATTEMPTS (25, about 13 hours of backoff),
    then the archived task failed the execution for good."""
    settings.HEADGATE = {
        "DURABLE_TASK_ATTEMPTS": 3,
        "BACKOFF_BASE": timedelta(milliseconds=1),
        "BACKOFF_CAP": timedelta(milliseconds=5),
    }
    wf = start("fail-op-then-wait")
    drive()  # the Operation ran; the workflow waits for a signal
    seq = types(wf).index("OperationCompleted") + 1
    stored = history(wf)[seq - 1][1]
    # Valid JSON to every database, but Python refuses an integer of 5,000 digits.
    _write_raw_payload(wf, seq, '{"command_id": "op:1", "result": %s}' % ("1" * 5000))
    histories.forget(wf)  # a worker that has not read it yet (another process, a restart)
    Job.objects.filter(kind=TASK_KIND).update(state="available")
    replay_until_suspended(wf)
    row = view(wf)
    assert row.suspended_reason.startswith(
        "the workflow task failed 3 times: ValueError: Exceeds the limit (4300 digits)"
    )
    assert task_job(wf).state == "scheduled"  # kept for resume, not failed
    suspended = HistoryEvent.objects.get(execution_id=wf, seq=row.history_length)
    assert (suspended.type, suspended.payload["reason"]) == (
        "WorkflowSuspended",
        row.suspended_reason,
    )
    assert ", in read\n" in suspended.payload["traceback"]  # down to the cache's read

    HistoryEvent.objects.filter(execution_id=wf, seq=seq).update(payload=stored)  # repaired
    durable.Manager().resume(wf)
    durable.Client().signal(wf, "go")
    drive(tasks_due=True)
    assert view(wf).state == "succeeded"


@durable.operation("fail-aborts", version="1", max_attempts=10)
def aborts(ctx: Any, _: Any) -> Any:
    runs.append(ctx.attempt)
    raise durable.Abort("card declined")


@durable.workflow("fail-aborts", version="1")
def calls_aborts(ctx: durable.Context, _: Any) -> Any:
    return ctx.execute_operation("fail-aborts", "1", None).result()


runs: list[int] = []


@pytest.mark.django_db(transaction=True)  # refusing_operation_failure: DDL commits on MariaDB
def test_an_operation_whose_outcome_cannot_be_recorded_is_made_uncertain(
    settings: Any,
) -> None:
    """The runtime's write after the handler (here: noting an ``Abort``) failing on every
    attempt was retried on the job table's MAX_ATTEMPTS (25, about 13 hours of backoff),
    the execution running with no reason shown, then the Operation failed with the
    store's error. It now gets the budget of a failing workflow task, then an operator's
    decision."""
    settings.HEADGATE = {
        "DURABLE_TASK_ATTEMPTS": 3,
        "BACKOFF_BASE": timedelta(milliseconds=1),
        "BACKOFF_CAP": timedelta(milliseconds=5),
    }
    runs.clear()
    wf = start("fail-aborts")
    job_id = f"{wf}:op:1"
    with refusing_operation_failure(job_id):
        drive()
    assert runs == [1, 2, 3]  # the runtime failed after the handler: each attempt reran it
    row = view(wf)
    assert row.state == "suspended"
    assert row.suspended_reason.startswith(
        f"Operation job {job_id} is uncertain: its job failed 3 times outside the "
        "Operation's code: "
    )
    assert REFUSED in row.suspended_reason
    job = op_job(wf)
    assert job.state == "archived"
    assert [e["error"].split(":")[0] for e in job.errors][2:] == ["uncertain"]  # skipped
    assert len(job.errors) == 3 and all(REFUSED in e["error"] for e in job.errors)
    assert types(wf)[-1] == "OperationUncertain"

    durable.Manager().resolve_uncertain(job_id, "retry")  # the store takes the note again
    drive(tasks_due=True)
    assert runs == [1, 2, 3, 1]
    assert view(wf).failure_reason == "OperationFailedError: card declined"

"""Operations as leased jobs, end to end through the database (azync cases 3–14): one
Operation, crash and retry of the schedule, idempotent results, retries, failures, skip,
snooze, uncertain outcomes and their resolution."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from headgate_django import DefinitionError, Skip, Snooze, durable, store, testing
from headgate_django.exceptions import (
    InvalidTransitionError,
    NotFoundError,
    OperationFailedError,
    PayloadError,
)
from headgate_django.models import HistoryEvent, Job
from headgate_django.store import durable_history
from headgate_django.store.durable import NewEvent, execution_cancel
from headgate_django.store.durable_jobs import operation_envelope, settle_finished_operations
from headgate_django.store.packet import max_packet
from tests.durable.helpers import (
    counts,
    drive,
    history,
    live_jobs,
    op_job,
    op_jobs,
    start,
    task_job,
    types,
    view,
)

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()
keys_seen: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    keys_seen.clear()


@durable.operation("ops-check-status", version="1")
def check_status(ctx: Any, order: dict[str, Any]) -> dict[str, Any]:
    calls["check"] += 1
    keys_seen.append(ctx.execution_key)
    return {"status": "approved", "ref": order["ref"]}


@durable.operation("ops-flaky", version="1", max_attempts=3)
def flaky(ctx: Any, _: Any) -> str:
    calls["flaky"] += 1
    keys_seen.append(ctx.execution_key)
    if ctx.attempt == 1:
        raise ConnectionError("try again")
    return "ok"


@durable.operation("ops-panics", version="1", max_attempts=2)
def panics(ctx: Any, _: Any) -> str:
    calls["panics"] += 1
    raise RuntimeError("operation panic: boom")


@durable.operation("ops-aborts", version="1", max_attempts=5)
def aborts(ctx: Any, _: Any) -> str:
    calls["aborts"] += 1
    raise durable.Abort("card declined")


@durable.operation("ops-skips", version="1")
def skips(ctx: Any, _: Any) -> str:
    raise Skip("already")


@durable.operation("ops-not-ready", version="1")
def not_ready(ctx: Any, _: Any) -> str:
    calls["not-ready"] += 1
    if calls["not-ready"] == 1:
        raise Snooze(timedelta(minutes=45))
    return "ready"


@durable.operation("ops-unsure", version="1")
def unsure(ctx: Any, _: Any) -> str:
    calls["unsure"] += 1
    keys_seen.append(ctx.execution_key)
    if calls["unsure"] == 1:
        raise durable.Uncertain("the bank did not answer")
    return "second try"


@durable.operation("ops-not-json", version="1")
def not_json(ctx: Any, _: Any) -> Any:
    return {1, 2}


@durable.operation("ops-returns-text", version="1")
def returns_text(ctx: Any, n: int) -> str:
    calls["text"] += 1
    return "x" * n


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


UNSTORABLE = {"nul": {"name": "a\x00b"}, "surrogate": ["a\ud800b"], "deep": _nested(40)}


@durable.operation("ops-returns-unstorable", version="1")
def returns_unstorable(ctx: Any, kind: str) -> Any:
    calls["unstorable"] += 1
    return UNSTORABLE[kind]


@durable.workflow("ops-call-unstorable", version="1")
def call_unstorable(ctx: durable.Context, kind: str) -> Any:
    error = ctx.execute_operation("ops-returns-unstorable", "1", kind).exception()
    return {"error": str(error)} if error is not None else "kept"


@durable.workflow("ops-call-text", version="1")
def call_text(ctx: durable.Context, n: int) -> Any:
    error = ctx.execute_operation("ops-returns-text", "1", n).exception()
    return {"error": str(error)[-60:]} if error is not None else "kept"  # its end: the limit


@durable.workflow("ops-one", version="1")
def one(ctx: durable.Context, order: dict[str, Any]) -> Any:
    return ctx.execute_operation("ops-check-status", "1", order).result()


@durable.workflow("ops-call", version="1")
def call(ctx: durable.Context, name: str) -> Any:
    """Calls Operation ``name`` and reports how it went."""
    future = ctx.execute_operation(name, "1", None)
    error = future.exception()
    if error is not None:
        return {"error": str(error)}
    return f"done:{future.result() or ''}"


@durable.workflow("ops-raise", version="1")
def raise_on_failure(ctx: durable.Context, name: str) -> Any:
    return ctx.execute_operation(name, "1", None).result()


@durable.workflow("ops-parallel", version="1")
def parallel(ctx: durable.Context, refs: list[str]) -> Any:
    futures = [ctx.start_operation("ops-check-status", "1", {"ref": r}) for r in refs]
    return [f.result()["ref"] for f in futures]


def test_case_03_one_operation() -> None:
    wf = start("ops-one", {"ref": "abc"})
    testing.run_one()  # pass 1
    assert types(wf) == ["WorkflowStarted", "OperationScheduled"]
    assert history(wf)[1][1] == {
        "command_id": "op:1",
        "name": "ops-check-status",
        "version": "1",
        "input": {"ref": "abc"},
        "execution_key": f"{wf}:op:1",
    }
    assert task_job(wf).state == "scheduled"  # parked: only the Operation can wake it
    drive()
    assert calls["check"] == 1
    assert keys_seen == [f"{wf}:op:1"]
    assert types(wf) == [
        "WorkflowStarted",
        "OperationScheduled",
        "OperationCompleted",
        "WorkflowCompleted",
    ]
    assert history(wf)[2][1] == {
        "command_id": "op:1",
        "result": {"status": "approved", "ref": "abc"},
    }
    row = view(wf)
    assert (row.state, row.result, row.history_length) == (
        "succeeded",
        {"status": "approved", "ref": "abc"},
        4,
    )
    assert row.finished_at is not None
    assert live_jobs(wf) == []
    assert op_job(wf).state == "completed" and task_job(wf).state == "completed"


def test_case_04_a_scheduled_operation_runs_once_after_the_pass_crashed() -> None:
    wf = start("ops-one", {"ref": "abc"})
    testing.run_one()  # the pass recorded OperationScheduled; say its worker died here
    assert op_job(wf).state == "available"
    drive()
    assert calls["check"] == 1
    assert view(wf).state == "succeeded"


def test_an_operation_of_an_execution_cancelled_before_its_jobs_does_not_run() -> None:
    """A cancel commits the execution's state, then cancels its jobs in a second
    transaction; a process that dies between the two leaves the Operation's job available.
    Its first attempt must still see the execution is over and leave the effect alone."""
    wf = start("ops-one", {"ref": "abc"})
    testing.run_one()  # the pass scheduled the Operation
    assert op_job(wf).state == "available"
    execution_cancel(wf, reason="by hand")  # ... and the process died here
    drive()
    assert calls["check"] == 0
    assert view(wf).state == "cancelled"
    job = op_job(wf)
    assert job.state == "archived"  # skipped
    assert "cancelled" in str(job.errors)
    assert "OperationCompleted" not in types(wf)


def test_case_05_a_retried_schedule_finds_the_job_it_already_enqueued() -> None:
    wf = start("ops-one", {"ref": "abc"})
    testing.run_one()
    scheduled = history(wf)[1][1]
    # A pass retried after a crash schedules the same command with the same execution key:
    # the enqueue finds the job the first pass made instead of making a second one.
    again = operation_envelope(
        wf,
        command_id=scheduled["command_id"],
        name=scheduled["name"],
        version=scheduled["version"],
        input=scheduled["input"],
        execution_key=scheduled["execution_key"],
        queue="default",
        max_attempts=op_job(wf).max_attempts,
    )
    assert store.job_insert_many([again]) == [f"{wf}:op:1"]
    drive()
    assert len(op_jobs(wf)) == 1
    assert calls["check"] == 1
    assert types(wf).count("OperationScheduled") == 1
    assert view(wf).state == "succeeded"


def test_case_06_an_operation_outcome_is_recorded_once() -> None:
    wf = start("ops-one", {"ref": "abc"})
    testing.run_one()
    testing.run_one()  # the Operation: its ack recorded OperationCompleted
    assert types(wf).count("OperationCompleted") == 1
    with transaction.atomic(), store.vendor.connection_for("default").cursor() as cursor:
        conn = store.vendor.connection_for("default")
        assert settle_finished_operations(cursor, conn, wf) == 0  # nothing left to record
    last = view(wf).history_length
    duplicate = NewEvent("OperationCompleted", {"command_id": "op:1"}, fact_key=f"{wf}:op:1")
    with pytest.raises(IntegrityError), transaction.atomic():
        durable_history.history_append(wf, expected_seq=last, events=[duplicate])
    other = NewEvent("OperationCompleted", {"command_id": "op:9"}, fact_key=f"{wf}:op:9")
    assert durable_history.history_append(wf, expected_seq=last, events=[other]) == last + 1


def test_operations_started_together_run_concurrently() -> None:
    wf = start("ops-parallel", ["a", "b", "c"])
    testing.run_one()
    assert [j.state for j in op_jobs(wf)] == ["available"] * 3
    drive()
    assert view(wf).result == ["a", "b", "c"]
    assert types(wf).count("OperationScheduled") == 3


def test_a_pass_may_start_more_operations_than_one_enqueue_takes(settings: Any) -> None:
    # Every pass failed with BatchError ("a batch holds at most 3 jobs, got 7") and was
    # retried until the execution was suspended: MAX_BATCH caps an enqueue call, and a
    # pass's Operations were written as one.
    settings.HEADGATE = {"MAX_BATCH": 3}
    refs = [str(n) for n in range(7)]
    wf = start("ops-parallel", refs)
    testing.run_one()
    assert [j.state for j in op_jobs(wf)] == ["available"] * 7
    drive()
    assert view(wf).result == refs


def test_case_07_a_failed_attempt_is_retried_without_history(fast_retries: None) -> None:
    wf = start("ops-call", "ops-flaky")
    testing.run_one()
    testing.run_one()  # attempt 1 fails
    job = op_job(wf)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert job.errors[0]["error"] == "ConnectionError: try again"
    drive()
    assert view(wf).result == "done:ok"
    assert "OperationFailed" not in types(wf)
    assert keys_seen == [f"{wf}:op:1", f"{wf}:op:1"]  # the same execution key on both attempts


def test_case_08_an_exhausted_operation_fails_the_workflow(fast_retries: None) -> None:
    wf = start("ops-raise", "ops-panics")
    drive()
    assert calls["panics"] == 2
    failed = [p for t, p in history(wf) if t == "OperationFailed"]
    assert len(failed) == 1 and "operation panic: boom" in failed[0]["error"]
    row = view(wf)
    assert row.state == "failed"
    assert row.failure_reason.startswith("OperationFailedError: RuntimeError: operation panic")
    assert types(wf)[-1] == "WorkflowFailed"


def test_case_09_abort_fails_the_operation_at_once() -> None:
    wf = start("ops-call", "ops-aborts")
    drive()
    assert calls["aborts"] == 1
    assert [p for t, p in history(wf) if t == "OperationFailed"] == [
        {"command_id": "op:1", "error": "card declined"}
    ]
    assert view(wf).result == {"error": "card declined"}


def test_case_09_the_future_raises_operation_failed_error() -> None:
    wf = start("ops-raise", "ops-aborts")
    drive()
    row = view(wf)
    assert (row.state, row.failure_reason) == ("failed", "OperationFailedError: card declined")
    assert issubclass(OperationFailedError, Exception)


def test_case_10_a_skipped_operation_completes_without_a_result() -> None:
    wf = start("ops-call", "ops-skips")
    drive()
    assert [p for t, p in history(wf) if t == "OperationCompleted"] == [{"command_id": "op:1"}]
    assert view(wf).result == "done:"
    assert op_job(wf).state == "archived"  # headgate's skip: archived, never retried


def test_case_11_a_snoozed_operation_runs_later_without_an_attempt() -> None:
    wf = start("ops-call", "ops-not-ready")
    testing.run_jobs()
    job = op_job(wf)
    assert (job.state, job.attempt) == ("scheduled", 0)
    assert job.scheduled_at >= store.db_now() + timedelta(minutes=30)
    assert job.errors == []
    assert types(wf) == ["WorkflowStarted", "OperationScheduled"]
    drive()  # makes the snoozed job due
    assert view(wf).result == "done:ready"


def test_a_non_json_result_fails_the_operation() -> None:
    wf = start("ops-call", "ops-not-json")
    drive()
    assert "not JSON" in view(wf).result["error"]


def test_a_result_too_large_to_keep_fails_the_operation_at_once(settings: Any) -> None:
    # It failed each attempt after the effect had run, and the effect ran again every time.
    settings.HEADGATE = {"MAX_RESULT_BYTES": 100}
    wf = start("ops-call-text", 200)
    drive()
    assert "over the 100-byte limit (HEADGATE['MAX_RESULT_BYTES'])" in view(wf).result["error"]
    assert calls["text"] == 1


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("nul", "a NUL character"),
        ("surrogate", "an unpaired surrogate"),
        ("deep", "deeper than 24 levels"),
    ],
)
def test_a_result_no_database_can_keep_fails_the_operation_at_once(
    kind: str, why: str, fast_retries: None
) -> None:
    # It was retried up to its attempt budget, running the effect again every time.
    wf = start("ops-call-unstorable", kind)
    drive()
    assert view(wf).state == "succeeded"
    error = view(wf).result["error"]
    assert error.startswith("the Operation's result cannot be kept: ") and why in error
    assert calls["unstorable"] == 1


@pytest.mark.skipif(connection.vendor != "mysql", reason="max_allowed_packet: MySQL/MariaDB")
def test_a_result_over_max_allowed_packet_fails_the_operation_at_once() -> None:
    # Under MAX_RESULT_BYTES (32 MiB) but over MariaDB's default packet (16 MiB).
    wf = start("ops-call-text", max_packet(connection))
    drive()
    assert "lower HEADGATE['MAX_RESULT_BYTES'] so results fail early)" in view(wf).result["error"]
    assert calls["text"] == 1


# -- uncertain outcomes -----------------------------------------------------------------


def uncertain_execution() -> str:
    wf = start("ops-call", "ops-unsure")
    drive()
    return wf


def test_case_12_uncertain_then_resolved_complete() -> None:
    wf = uncertain_execution()
    job = op_job(wf)
    assert job.state == "archived" and job.expires_at is None  # kept for the operator
    row = view(wf)
    assert row.state == "suspended"
    assert "the bank did not answer" in row.suspended_reason
    assert types(wf) == ["WorkflowStarted", "OperationScheduled", "OperationUncertain"]
    assert history(wf)[2][1] == {"command_id": "op:1", "reason": "the bank did not answer"}

    durable.Manager().resolve_uncertain(job.id, "complete", "ok")
    assert types(wf)[3:] == ["OperationUncertainResolved", "OperationCompleted"]
    assert view(wf).state == "running"
    assert task_job(wf).state == "available"  # woken in the same transaction
    drive()
    assert view(wf).result == "done:ok"
    assert calls["unsure"] == 1  # nobody re-ran the effect

    before = counts()
    with pytest.raises(InvalidTransitionError, match="is not uncertain"):
        durable.Manager().resolve_uncertain(job.id, "complete", "again")
    assert counts() == before
    assert [p["result"] for t, p in history(wf) if t == "OperationCompleted"] == ["ok"]


def test_case_12_resolve_retry_runs_the_operation_again() -> None:
    wf = uncertain_execution()
    durable.Manager().resolve_uncertain(op_job(wf).id, "retry")
    assert op_job(wf).state == "available"
    assert view(wf).state == "running"
    drive()
    assert view(wf).result == "done:second try"
    assert keys_seen == [f"{wf}:op:1", f"{wf}:op:1"]


def test_case_13_a_stale_resolve_changes_nothing() -> None:
    wf = uncertain_execution()
    job_id = op_job(wf).id
    durable.Manager().resolve_uncertain(job_id, "retry")
    claimed = store.job_claim(worker_id="w", limit=1, lease_ttl=timedelta(minutes=1))
    assert [c.ref.job_id for c in claimed] == [job_id]
    before = (counts(), op_job(wf).lease_id, op_job(wf).fence)
    with pytest.raises(InvalidTransitionError, match="is not uncertain"):
        durable.Manager().resolve_uncertain(job_id, "complete", "late")
    assert (counts(), op_job(wf).lease_id, op_job(wf).fence) == before
    assert op_job(wf).state == "running"


def test_case_14_resolve_fail_gives_the_error() -> None:
    wf = uncertain_execution()
    durable.Manager().resolve_uncertain(op_job(wf).id, "fail", {"error": "x"})
    drive()
    assert view(wf).result == {"error": "x"}


def test_case_14_resolve_fail_without_an_error() -> None:
    wf = uncertain_execution()
    durable.Manager().resolve_uncertain(op_job(wf).id, "fail")
    drive()
    assert view(wf).result == {"error": "uncertain: fail"}


def test_hazard_7_a_resolve_cut_short_before_its_wake_up_writes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """azync appended the outcome after the decision's commit and woke the workflow after
    that: a crash in between left the Operation decided with nothing in history. Here a
    failure at the last write (the wake-up) takes the decision and the history with it."""
    from headgate_django.store import durable_jobs

    wf = uncertain_execution()
    job_id = op_job(wf).id
    before = (counts(), types(wf), op_job(wf).checkpoint, view(wf).state)

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the worker died before the wake-up")

    monkeypatch.setattr(durable_jobs, "task_wake", crash)
    with pytest.raises(RuntimeError, match="before the wake-up"):
        durable.Manager().resolve_uncertain(job_id, "complete", "ok")
    monkeypatch.undo()
    assert (counts(), types(wf), op_job(wf).checkpoint, view(wf).state) == before
    durable.Manager().resolve_uncertain(job_id, "complete", "ok")  # still undecided
    drive()
    assert view(wf).result == "done:ok"


@pytest.mark.parametrize(
    ("decision", "result", "error", "refusal"),
    [
        ("complete", {"name": "a\x00b"}, "", "a NUL character"),
        ("complete", _nested(30), "", "deeper than 24 levels"),
        ("complete", "x" * 2000, "", "over the 1000-byte limit"),
        ("fail", None, "declined\x00", "a NUL character"),
    ],
)
def test_a_decision_no_database_can_keep_is_refused_and_writes_nothing(
    decision: str, result: Any, error: str, refusal: str, settings: Any
) -> None:
    # It failed with the database's own error (PostgreSQL: NUL; MariaDB: nesting), or was
    # recorded and then failed the workflow that read it back.
    settings.HEADGATE = {"MAX_RESULT_BYTES": 1000}
    wf = uncertain_execution()
    before = (counts(), op_job(wf).state, view(wf).state)
    with pytest.raises(PayloadError, match=refusal):
        durable.Manager().resolve_uncertain(op_job(wf).id, decision, result, error)
    assert (counts(), op_job(wf).state, view(wf).state) == before
    assert types(wf)[-1] == "OperationUncertain"


def test_resolve_of_a_non_uncertain_or_missing_operation_writes_nothing() -> None:
    wf = start("ops-one", {"ref": "abc"})
    drive()
    before = counts()
    with pytest.raises(InvalidTransitionError, match="is not uncertain"):
        durable.Manager().resolve_uncertain(op_job(wf).id, "complete", 1)
    with pytest.raises(NotFoundError):
        durable.Manager().resolve_uncertain("no-such-job", "complete", 1)
    with pytest.raises(NotFoundError):
        durable.Manager().resolve_uncertain(task_job(wf).id, "complete", 1)
    with pytest.raises(DefinitionError, match="decision must be one of"):
        durable.Manager().resolve_uncertain(op_job(wf).id, "maybe", 1)
    assert counts() == before


def test_a_rerun_after_a_crash_does_not_repeat_an_uncertain_operation() -> None:
    wf = uncertain_execution()
    # An attempt that recorded the uncertainty but died before its job was archived:
    Job.objects.filter(pk=op_job(wf).pk).update(state="available", attempt=0, crash_attempt=1)
    drive()
    assert calls["unsure"] == 1
    assert op_job(wf).state == "archived"
    assert view(wf).state == "suspended"
    assert HistoryEvent.objects.filter(execution_id=wf, type="OperationUncertain").count() == 1

"""Operations under leases, in-process: StartToClose (case 15) and crashed workflow-task
and Operation jobs reclaimed and re-run (case 40). ``test_workers.py`` covers heartbeats
(16), a lost lease (17) and SIGKILL with real worker processes."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import durable, store, testing
from tests.durable.helpers import drive, op_job, start, task_job, types, view

pytestmark = pytest.mark.django_db(transaction=True)

seen: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


@durable.operation("lease-slow", version="1", timeout=timedelta(milliseconds=300))
def slow(ctx: Any, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.01)
    seen.append({"cancelled": ctx.cancelled})
    return "finished"


@durable.workflow("lease-call", version="1")
def call(ctx: durable.Context, args: list[Any]) -> Any:
    name, value = args
    return ctx.execute_operation(name, "1", value).result()


def test_case_15_an_attempt_past_start_to_close_is_uncertain() -> None:
    wf = start("lease-call", ["lease-slow", 5.0])
    testing.run_one()  # pass 1
    started = time.monotonic()
    assert testing.run_one() == (f"{wf}:op:1", "lost")  # its job was taken at the timeout
    assert time.monotonic() - started < 4  # the watchdog cancelled the handler
    assert seen == [{"cancelled": True}]
    job = op_job(wf)
    assert (job.state, job.expires_at, job.lease_id) == ("archived", None, None)
    assert job.errors[-1]["kind"] == "uncertain"
    assert "start-to-close timeout" in job.errors[-1]["error"]
    row = view(wf)
    assert row.state == "suspended"
    assert "start-to-close timeout after 0:00:00.300000 (uncertain)" in row.suspended_reason
    assert types(wf)[-1] == "OperationUncertain"
    durable.Manager().resolve_uncertain(job.id, "complete", "by hand")
    drive()
    assert view(wf).result == "by hand"


@durable.operation("lease-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    seen.append({"key": ctx.execution_key, "attempt": ctx.attempt})
    return value


def crash(job_id: str) -> None:
    """A worker claims ``job_id`` and dies: its lease lapses and the reclaim duty runs."""
    claimed = store.job_claim(worker_id="doomed", limit=1, lease_ttl=timedelta(milliseconds=1))
    assert [c.ref.job_id for c in claimed] == [job_id]
    time.sleep(0.01)
    assert store.job_reclaim_expired().retried == [job_id]


def test_case_40_a_crashed_workflow_task_is_reclaimed_and_rerun() -> None:
    wf = start("lease-call", ["lease-echo", 7])
    crash(task_job(wf).id)
    assert task_job(wf).state == "retryable"
    drive(tasks_due=True)
    assert view(wf).result == 7
    assert task_job(wf).crash_attempt == 0  # a committed pass clears the crash count


def test_case_40_a_crashed_operation_is_reclaimed_and_rerun() -> None:
    wf = start("lease-call", ["lease-echo", 8])
    testing.run_one()
    crash(op_job(wf).id)
    drive()
    assert view(wf).result == 8
    assert seen == [{"key": f"{wf}:op:1", "attempt": 2}]

"""Operations under real leases: StartToClose (case 15), heartbeats (16), a lost lease (17)
and crashed workflow-task and Operation jobs reclaimed and re-run (case 40, in-process;
``test_kill.py`` does it with SIGKILL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import durable, store, testing
from headgate_django.models import Job
from headgate_django.worker.runner import Worker
from tests.conftest import wait_for
from tests.durable.helpers import drive, history, op_job, start, task_job, types, view

pytestmark = pytest.mark.django_db(transaction=True)

SEEN: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


@durable.operation("lease-slow", version="1", timeout=timedelta(milliseconds=300))
def slow(ctx: Any, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.01)
    SEEN.append({"cancelled": ctx.cancelled})
    return "finished"


@durable.operation("lease-long", version="1", timeout=timedelta(seconds=10))
def long(ctx: Any, seconds: float) -> str:
    time.sleep(seconds)
    return "ok"


@durable.operation("lease-wait", version="1")
def wait_until_cancelled(ctx: Any, _: Any) -> str:
    first = not SEEN
    SEEN.append({"attempt": ctx.attempt})
    if first:
        SEEN[-1]["cancelled"] = ctx.wait_cancelled(10)
        return "late"
    return "second"


@durable.workflow("lease-call", version="1")
def call(ctx: durable.Context, args: list[Any]) -> Any:
    name, value = args
    return ctx.execute_operation(name, "1", value).result()


@pytest.fixture
def worker() -> Iterator[Worker]:
    """An in-process worker with a 300 ms lease (renewed every 100 ms), run on a thread."""
    w = Worker(concurrency=4, lease_ttl=timedelta(milliseconds=300), worker_id="lease-test")
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    yield w
    w.stop()
    thread.join(30)


def test_case_15_an_attempt_past_start_to_close_is_uncertain() -> None:
    wf = start("lease-call", ["lease-slow", 5.0])
    testing.run_one()  # pass 1
    started = time.monotonic()
    assert testing.run_one() == (f"{wf}:op:1", "lost")  # its job was taken at the timeout
    assert time.monotonic() - started < 4  # the watchdog cancelled the handler
    assert SEEN == [{"cancelled": True}]
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


def test_case_16_heartbeats_keep_a_long_operation_leased(worker: Worker) -> None:
    wf = start("lease-call", ["lease-long", 1.0])  # three times the lease
    wait_for(lambda: view(wf).state == "succeeded", timeout=30)
    job = op_job(wf)
    assert (job.crash_attempt, job.attempt, job.errors) == (0, 0, [])
    assert view(wf).result == "ok"


def test_case_17_a_lost_lease_cancels_the_handler_and_writes_nothing(worker: Worker) -> None:
    wf = start("lease-call", ["lease-wait", None])
    wait_for(lambda: SEEN, timeout=30)
    Job.objects.filter(pk=f"{wf}:op:1").update(lease_id="someone-else")  # the lease is gone
    wait_for(lambda: "cancelled" in SEEN[0], timeout=30)
    assert SEEN[0]["cancelled"] is True
    assert "OperationCompleted" not in types(wf)
    # The reclaim duty charges the crash once the stolen lease lapses; the rerun settles it.
    wait_for(lambda: view(wf).state == "succeeded", timeout=30)
    assert view(wf).result == "second"
    assert [p["result"] for t, p in history(wf) if t == "OperationCompleted"] == ["second"]
    assert op_job(wf).crash_attempt == 1


@durable.operation("lease-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    SEEN.append({"key": ctx.execution_key, "attempt": ctx.attempt})
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
    assert SEEN == [{"key": f"{wf}:op:1", "attempt": 2}]

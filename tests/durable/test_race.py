"""At most one replay pass of an execution ever commits: two passes forced to overlap (a
stale worker whose lease was reclaimed, and the worker that took the task over) never
append duplicate events, and a fact landing during a pass makes it replay again."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import durable, store, testing
from headgate_django.context import JobContext
from headgate_django.control import Snooze
from headgate_django.durable import workflow_task
from headgate_django.exceptions import LeaseLostError, RevisionConflictError
from headgate_django.store.durable_history import NewEvent, history_append
from headgate_django.store.maintenance import job_make_due
from tests.durable.helpers import drive, in_parallel, op_jobs, start, task_job, types, view

pytestmark = pytest.mark.django_db(transaction=True)


@durable.operation("race-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("race-wf", version="1")
def race_wf(ctx: durable.Context, _: Any) -> Any:
    first = ctx.execute_operation("race-echo", "1", "a").result()
    signals = [ctx.wait_signal("s") for _ in range(2)]
    ctx.select(signals[0])
    return [first, signals[0].result()]


def test_concurrent_appends_at_one_seq_land_once() -> None:
    wf = start("race-wf")
    barrier = threading.Barrier(2)

    def append(n: int) -> int:
        barrier.wait(10)
        return history_append(
            wf, expected_seq=1, events=[NewEvent("SignalReceived", {"name": "s", "payload": n})]
        )

    results = in_parallel(lambda: append(1), lambda: append(2))
    assert sorted(type(r).__name__ for r in results) == ["RevisionConflictError", "int"]
    assert types(wf) == ["WorkflowStarted", "SignalReceived"]


def test_two_overlapping_passes_never_append_duplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    wf = start("race-wf")
    stale = store.job_claim(worker_id="stale", limit=1, lease_ttl=timedelta(milliseconds=1))[0]
    time.sleep(0.01)
    assert store.job_reclaim_expired().retried == [stale.ref.job_id]  # the stale worker hangs
    job_make_due()
    fresh = store.job_claim(worker_id="fresh", limit=1, lease_ttl=timedelta(minutes=1))[0]
    assert fresh.ref.job_id == stale.ref.job_id and fresh.ref.fence == stale.ref.fence + 1

    commit = workflow_task.execution_commit_pass
    barrier = threading.Barrier(2)
    waited: set[int] = set()

    def commit_together(*args: Any, **kwargs: Any) -> int:
        if threading.get_ident() not in waited:  # both passes replayed: now both commit
            waited.add(threading.get_ident())
            barrier.wait(10)
        return commit(*args, **kwargs)

    monkeypatch.setattr(workflow_task, "execution_commit_pass", commit_together)

    def run_pass(claimed: Any) -> Any:
        return workflow_task.workflow_task(JobContext(claimed), execution_id=wf)

    stale_outcome, fresh_outcome = in_parallel(lambda: run_pass(stale), lambda: run_pass(fresh))
    monkeypatch.undo()
    assert isinstance(stale_outcome, LeaseLostError), stale_outcome
    assert isinstance(fresh_outcome, Snooze), fresh_outcome  # parked on the Operation
    assert types(wf) == ["WorkflowStarted", "OperationScheduled"]
    assert len(op_jobs(wf)) == 1
    store.job_snooze(fresh.ref, delay=timedelta(hours=1))  # what the worker does after it
    drive()
    durable.Client().signal(wf, "s", "go")
    drive()
    assert view(wf).result == ["a", "go"]
    assert types(wf).count("OperationScheduled") == 1


def test_a_fact_landing_during_a_pass_makes_it_replay_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wf = start("race-wf")
    drive()  # the Operation ran; the workflow waits for signal "s"
    assert view(wf).state == "running"
    commit = workflow_task.execution_commit_pass
    calls: list[int] = []

    def signal_first(*args: Any, **kwargs: Any) -> int:
        calls.append(kwargs["expected_seq"])
        if len(calls) == 1:  # a signal lands after this pass read the history
            durable.Client().signal(wf, "s", "meanwhile")
        return commit(*args, **kwargs)

    monkeypatch.setattr(workflow_task, "execution_commit_pass", signal_first)
    durable.Client().signal(wf, "noise", 0)  # wake the task
    testing.run_one()
    assert len(calls) == 2 and calls[1] == calls[0] + 1  # lost the race, replayed once more
    assert view(wf).result == ["a", "meanwhile"]
    assert task_job(wf).state == "completed"
    with pytest.raises(RevisionConflictError):
        history_append(
            wf, expected_seq=calls[0], events=[NewEvent("SignalReceived", {"name": "x"})]
        )

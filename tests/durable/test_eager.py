"""Eager Operations with real ``runworkers`` processes: a pass that blocks on one Operation
runs it on its own thread (one claim of the workflow task for a whole sequence), and only
when that cannot delay anything else; renewals of an Operation's lease on the store clock;
the status line of a worker lacking a workflow's code."""

from __future__ import annotations

import itertools
import re
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from headgate_django import durable
from headgate_django.models import Job
from headgate_django.store.operator import queue_set_paused
from headgate_django.store.packet import max_packet
from tests.app import durable_tasks  # noqa: F401  (registers the definitions here too)
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.durable.helpers import op_job, op_jobs, seqs, start, task_job, types, view
from tests.integration.helpers import FAST, headgate_env, runs, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def env(**settings: Any) -> dict[str, str]:
    return headgate_env(**{**FAST, "AUTODISCOVER_MODULES": ["tasks", "durable_tasks"], **settings})


def test_a_sequence_of_operations_runs_on_one_claim_of_the_workflow_task(
    start_worker: Any,
) -> None:
    wf = start("it-steps", 5)
    worker = start_worker("--worker-id", "w1", env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == [0, 1, 2, 3, 4]
    # Every claim bumps a job's fence: the task was claimed once, each Operation leased once
    # (by the pass that scheduled it, on this worker), and none waited in the queue.
    assert task_job(wf).fence == 1
    jobs = op_jobs(wf)
    assert len(jobs) == 5
    assert {(j.fence, j.claimed_by, j.state, j.attempt) for j in jobs} == {
        (1, "w1", "completed", 0)
    }
    assert seqs(wf) == list(range(1, 13))  # started, 5 × (scheduled, completed), completed
    assert worker.terminate() == 0
    # The status line counts the Operations it ran eagerly: 1 + 5 claims, 5 + 1 completions.
    stopped = re.search(r"stopped: claimed=(\d+) completed=(\d+)", worker.output())
    assert stopped and stopped.groups() == ("6", "6"), worker.output()


def test_facts_landing_during_an_eager_operation_are_replayed_with_its_outcome(
    start_worker: Any,
) -> None:
    wf = start("it-facts-around-op")
    worker = start_worker(env=env())
    wait_for(lambda: runs(f"{wf}:op:1"), timeout=60)
    time.sleep(0.5)  # the 200 ms timer is due now; the Operation runs for 2 s
    durable.Client().signal(wf, "go", {"by": "ops"})
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == ["ok", True, True, {"by": "ops"}]
    assert types(wf) == [
        "WorkflowStarted",
        "TimerScheduled",
        "OperationScheduled",
        "TimerFired",  # due before the signal arrived: recorded before it
        "SignalReceived",
        "OperationCompleted",
        "WorkflowCompleted",
    ]
    assert task_job(wf).fence == 1  # the pass after the Operation ran on the same claim
    assert worker.terminate() == 0


def test_a_select_does_not_run_its_operation_on_the_pass_thread(start_worker: Any) -> None:
    wf = start("it-long-or-signal", 20.0)
    worker = start_worker(env=env())
    op = f"{wf}:op:1"
    wait_for(lambda: runs(op), timeout=60)
    durable.Client().signal(wf, "stop")
    # The signal wins while the Operation still runs: its pass was not stuck behind it.
    wait_for(lambda: view(wf).state == "succeeded", timeout=15)
    assert view(wf).result == 1
    assert Job.objects.get(pk=op).state == "running"
    assert task_job(wf).fence >= 2
    worker.kill()


def test_an_operation_on_a_paused_queue_waits_in_it(start_worker: Any) -> None:
    queue_set_paused("side", True)
    wf = start("it-side-call", "x")
    worker = start_worker(env=env())
    wait_for(lambda: task_job(wf).state == "scheduled", timeout=60)  # the pass parked
    assert op_job(wf).state == "available"
    assert runs(f"{wf}:op:1") == []
    queue_set_paused("side", False)
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == "x"
    assert worker.terminate() == 0


def test_sigterm_during_an_eager_operation_finishes_it_and_hands_back_the_rest(
    start_worker: Any,
) -> None:
    wf = start("it-long-steps", [3, 1.0])
    worker = start_worker("--lease-ttl", "5", env=env())
    wait_for(lambda: runs(f"{wf}:op:1"), timeout=60)
    assert worker.terminate() == 0
    # The drain let the running Operation finish and record its outcome, and the workflow
    # task stopped taking Operations on: nothing is left leased, nothing charged a crash.
    assert op_job(wf, 1).state == "completed"
    assert Job.objects.filter(workflow_id=f"durable:{wf}", state="running").count() == 0
    assert {j.crash_attempt for j in op_jobs(wf)} | {task_job(wf).crash_attempt} == {0}
    assert view(wf).state == "running"
    rescuer = start_worker(env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == ["ok", "ok", "ok"]
    assert rescuer.terminate() == 0


@pytest.mark.parametrize("mode", ["combined", "operation-only"])
def test_an_operation_lease_is_renewed_at_least_every_half_lease_on_the_store_clock(
    start_worker: Any, mode: str
) -> None:
    """The worker renews every lease it holds every lease/3 in one statement, Operations run
    on a pass's thread included; renewals must land at least every lease/2."""
    lease = 3.0
    wf = start("it-call", ["it-lease-watch", 4 * lease])
    workers = [start_worker("--durable-mode", mode, "--lease-ttl", str(lease), env=env())]
    if mode == "operation-only":
        workers.append(start_worker("--durable-mode", "workflow-only", env=env()))
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    watched = view(wf).result
    renewals = [datetime.fromisoformat(x) - timedelta(seconds=lease) for x in watched["expiries"]]
    # The first expiry is the claim's own (PostgreSQL reads its clock once per column).
    claimed = datetime.fromisoformat(watched["claimed_at"])
    assert abs(renewals[0] - claimed) < timedelta(milliseconds=50)
    instants = [*renewals, datetime.fromisoformat(watched["end"])]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(instants)]
    assert len(renewals) >= 4
    assert max(gaps) <= lease / 2, gaps
    assert (op_job(wf).crash_attempt, op_job(wf).attempt) == (0, 0)
    for worker in workers:
        assert worker.terminate() == 0


def test_a_worker_lacking_a_workflow_says_so_in_its_status_line(start_worker: Any) -> None:
    wf = start("it-steps", 1)
    worker = start_worker(env=env(AUTODISCOVER_MODULES=["tasks"], STATUS_INTERVAL=0.2))
    wait_serving(worker)
    line = re.compile(r"status .*missing_code=\[workflow 'it-steps' v'1': 1 waiting\]")
    wait_for(lambda: line.search(worker.output()), timeout=30)
    assert "leaving its task for a worker that does" in worker.output()
    assert view(wf).state == "running"
    assert task_job(wf).state == "scheduled"  # left for another worker, not failed
    assert worker.terminate() == 0


@pytest.mark.skipif(connection.vendor != "mysql", reason="max_allowed_packet: MySQL/MariaDB")
def test_an_eager_operation_result_too_large_for_a_statement_fails_it_at_once(
    start_worker: Any,
) -> None:
    # Run on the pass's own thread, the Operation's result meets the check of any other:
    # over max_allowed_packet (below MAX_RESULT_BYTES), it fails the Operation without a retry.
    wf = start("it-call-text", max_packet(connection))
    worker = start_worker("--worker-id", "w1", env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert "max_allowed_packet" in view(wf).result["error"]
    (job,) = op_jobs(wf)
    # Leased by the pass and run on its thread: the task was claimed only once.
    assert (job.fence, job.claimed_by, task_job(wf).fence) == (1, "w1", 1)
    assert Execution.objects.filter(job_id=job.id).count() == 1  # its effect ran once
    assert worker.terminate() == 0

"""Real ``runworkers`` processes: a SIGKILLed worker in the middle of an Operation (azync
case 40 with the recommended outcome), heartbeats (case 16), a lost lease (case 17) and
``--durable-mode``."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import durable
from headgate_django.models import Execution, Job
from tests.app import durable_tasks  # noqa: F401  (registers the definitions here too)
from tests.conftest import wait_for
from tests.durable.helpers import history, op_job, start, view
from tests.integration.helpers import FAST, headgate_env, runs, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def env() -> dict[str, str]:
    return headgate_env(**FAST, AUTODISCOVER_MODULES=["tasks", "durable_tasks"])


def test_a_killed_worker_mid_operation_is_reclaimed_and_the_workflow_completes(
    start_worker: Any,
) -> None:
    wf = start("it-two-steps", "kill-once")
    victim = start_worker("--no-duties", "--lease-ttl", "1", env=env())
    crashing = f"{wf}:op:2"
    wait_for(lambda: runs(crashing), timeout=60)
    victim.kill()

    rescuer = start_worker("--lease-ttl", "1", env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == ["before", {"recovered": "kill-once"}]
    attempts = runs(crashing)
    assert [e.label for e in attempts] == [crashing, crashing]  # the same execution key
    assert [e.pid for e in attempts] == [victim.pid, rescuer.pid]
    job = op_job(wf, 2)
    assert (job.crash_attempt, job.attempt) == (1, 0)
    assert [e["kind"] for e in job.errors] == ["crash"]
    assert rescuer.terminate() == 0


def test_a_worker_killed_between_the_decision_and_the_child_start_starts_one_child(
    start_worker: Any,
) -> None:
    wf = start("it-parent-killed", "kid")
    victim = start_worker("--no-duties", "--lease-ttl", "1", env=env())
    decided = f"decided:{wf}"
    wait_for(lambda: runs(decided), timeout=60)
    # The pass has issued ChildStarted but not committed it: nothing of the child exists.
    assert not Execution.objects.filter(parent_id=wf).exists()
    assert "ChildStarted" not in [t for t, _ in history(wf)]
    victim.kill()

    rescuer = start_worker("--lease-ttl", "1", env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == "kid"
    kids = list(Execution.objects.filter(parent_id=wf))
    assert [k.id for k in kids] == [f"{wf}:child:1"]
    assert [t for t, _ in history(wf)].count("ChildStarted") == 1
    assert len(runs(f"{wf}:child:1:op:1")) == 1  # the child's Operation ran once
    assert [e.pid for e in runs(decided)] == [victim.pid]
    assert rescuer.terminate() == 0


def test_a_worker_killed_inside_a_running_child_finishes_parent_and_child_once(
    start_worker: Any,
) -> None:
    wf = start("it-parent-of-two-steps", "deep")
    kid = f"{wf}:child:1"
    victim = start_worker("--no-duties", "--lease-ttl", "1", env=env())
    wait_for(lambda: runs(f"{kid}:op:2"), timeout=60)
    victim.kill()

    rescuer = start_worker("--lease-ttl", "1", env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == ["before", {"recovered": "deep"}]
    assert [k.id for k in Execution.objects.filter(parent_id=wf)] == [kid]
    assert [t for t, _ in history(wf)].count("ChildCompleted") == 1
    assert len(runs(f"{kid}:op:1")) == 1
    assert rescuer.terminate() == 0


def test_case_16_heartbeats_keep_a_long_operation_leased(start_worker: Any) -> None:
    wf = start("it-call", ["it-long", 3.0])  # three leases long
    worker = start_worker("--lease-ttl", "1", env=env())
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    job = op_job(wf)
    assert (job.crash_attempt, job.attempt, job.errors) == (0, 0, [])
    assert view(wf).result == "ok"
    assert worker.terminate() == 0


def test_case_17_a_lost_lease_cancels_the_handler_and_writes_nothing(start_worker: Any) -> None:
    wf = start("it-call", ["it-wait-cancel", None])
    worker = start_worker("--lease-ttl", "1", env=env())
    op = f"{wf}:op:1"
    wait_for(lambda: runs(op), timeout=60)
    Job.objects.filter(pk=op).update(lease_id="someone-else")  # its lease is gone
    wait_for(lambda: len(runs(op)) >= 2, timeout=60)
    assert runs(op)[1].label == "cancelled:True"  # the renewal failed: the handler stopped
    # Nothing the first attempt returned landed; the reclaim duty charged the crash once
    # the stolen lease lapsed, and the second attempt settled it.
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == "second"
    assert [p["result"] for t, p in history(wf) if t == "OperationCompleted"] == ["second"]
    assert op_job(wf).crash_attempt == 1
    assert worker.terminate() == 0


def test_workflow_only_and_operation_only_workers_share_the_work(start_worker: Any) -> None:
    wf = start("it-steps", 3)
    workflows = start_worker("--durable-mode", "workflow-only", "--worker-id", "wf", env=env())
    operations = start_worker("--durable-mode", "operation-only", "--worker-id", "op", env=env())
    wait_serving(workflows)
    wait_serving(operations)
    wait_for(lambda: view(wf).state == "succeeded", timeout=60)
    assert view(wf).result == [0, 1, 2]
    claimed = dict(Job.objects.filter(workflow_id=f"durable:{wf}").values_list("id", "claimed_by"))
    assert claimed.pop(f"{wf}:task") == "wf"
    assert set(claimed.values()) == {"op"}
    assert workflows.terminate() == 0 and operations.terminate() == 0


def test_runworkers_refuses_an_unknown_durable_mode(start_worker: Any) -> None:
    worker = start_worker("--durable-mode", "sometimes", env=env())
    assert worker.proc.wait(timeout=60) == 2
    assert "invalid choice: 'sometimes'" in worker.output()
    assert durable.Manager().list().items == []


def test_an_undecodable_workflow_task_fails_its_execution_with_the_reason(
    start_worker: Any,
) -> None:
    """Nothing would ever replay an execution whose workflow task is undecodable: the
    generic job verbs refuse the runtime's jobs. It fails, with the reason, in the commit
    that parks the task; left running, its waiters and the console would wait for ever."""
    wf = start("it-two-steps", "never-decoded")
    Job.objects.filter(pk=f"{wf}:task").update(payload=b"\xff not a payload")
    worker = start_worker("--lease-ttl", "1", env=env())
    wait_for(lambda: view(wf).state != "running", timeout=60)

    execution = view(wf)
    assert execution.state == "failed", execution
    assert execution.failure_reason.startswith("its workflow task is undecodable: ")
    assert history(wf)[-1] == ("WorkflowFailed", {"reason": execution.failure_reason})
    assert Job.objects.get(pk=f"{wf}:task").state == "undecodable"
    assert worker.terminate() == 0

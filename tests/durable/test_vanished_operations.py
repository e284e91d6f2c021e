"""The reconcile duty puts back an Operation job that vanished (a row deleted by hand or by
an older version's generic verbs), so the execution neither waits for ever nor runs the
Operation's effect twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from headgate_django import durable, store, testing
from headgate_django.durable import duties
from headgate_django.models import Execution, Job
from headgate_django.store.durable_repair import RESTORED_REASON
from tests.durable.helpers import drive, history, op_job, start, types, view

pytestmark = pytest.mark.django_db

calls: dict[str, int] = {"charge": 0, "unsure": 0}


@durable.operation("vanish-charge", version="1")
def charge(ctx: Any, order: Any) -> Any:
    calls["charge"] += 1
    return {"charged": order, "key": ctx.execution_key}


@durable.operation("vanish-unsure", version="1")
def unsure(ctx: Any, order: Any) -> Any:
    calls["unsure"] += 1
    raise durable.Uncertain("the bank did not answer")


@durable.workflow("vanish-checkout", version="1")
def checkout(ctx: durable.Context, operation: str) -> Any:
    return ctx.execute_operation(operation, "1", "order-7").result()


@durable.workflow("vanish-noted", version="1")
def noted(ctx: durable.Context, _: Any) -> Any:
    ctx.state["notes"] = []
    ctx.select(ctx.wait_signal("go"))
    return ctx.execute_operation("vanish-charge", "1", ctx.state["notes"]).result()


@noted.update("note")
def note(ctx: durable.Context, text: str) -> int:
    ctx.state["notes"].append(text)
    return len(ctx.state["notes"])


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.update(charge=0, unsure=0)
    duties._sweep["after"] = ""


def idle(workflow_id: str) -> None:
    """Make the execution look idle for longer than the duty waits before it looks."""
    Execution.objects.filter(pk=workflow_id).update(updated_at=store.db_now() - timedelta(hours=1))


def test_an_undecided_uncertain_operation_gets_its_job_back_for_the_operator() -> None:
    wf = start("vanish-checkout", "vanish-unsure")
    drive()
    job_id = op_job(wf).id
    assert view(wf).state == "suspended"
    Job.objects.filter(pk=job_id).delete()  # by hand, in the database
    durable.Manager().resume(wf)  # the operator resumes: nothing can decide it any more
    drive()
    assert view(wf).state == "running"
    idle(wf)

    assert duties.reconcile()["restored"] == 1
    restored = op_job(wf)
    assert restored.state == "archived"
    assert restored.checkpoint["durable"] == {"state": "uncertain", "reason": RESTORED_REASON}
    assert restored.expires_at is None  # kept until it is decided
    assert types(wf).count("OperationUncertain") == 1  # nothing recorded twice
    idle(wf)
    assert duties.reconcile()["restored"] == 0  # repaired once

    durable.Manager().resolve_uncertain(job_id, "complete", {"charged": "by hand"})
    drive()
    assert view(wf).state == "succeeded"
    assert view(wf).result == {"charged": "by hand"}
    assert calls["unsure"] == 1  # the uncertain effect never ran again


def test_an_operation_that_had_not_finished_runs_again_with_the_same_key() -> None:
    wf = start("vanish-checkout", "vanish-charge")
    testing.run_one()  # one pass: the Operation is scheduled, its job not yet run
    job_id = op_job(wf).id
    Job.objects.filter(pk=job_id).delete()
    drive()
    assert view(wf).state == "running"  # waiting for an outcome nothing would record
    assert calls["charge"] == 0
    idle(wf)

    assert duties.reconcile()["restored"] == 1
    assert op_job(wf).state == "available"
    drive()
    assert view(wf).state == "succeeded"
    assert view(wf).result == {"charged": "order-7", "key": job_id}
    assert calls["charge"] == 1
    assert [t for t, _ in history(wf)].count("OperationCompleted") == 1


def test_accepted_updates_do_not_hide_a_vanished_operation() -> None:
    wf = start("vanish-noted")
    drive()
    for n in range(2):  # their UpdateAccepted events carry fact keys too
        durable.Manager().update(wf, "note", f"n{n}", update_id=f"u-{n}", wait=False)
    drive()
    durable.Client().signal(wf, "go")
    testing.run_one()  # the pass schedules the Operation; its job does not run
    Job.objects.filter(pk=op_job(wf).pk).delete()
    idle(wf)

    assert duties.reconcile()["restored"] == 1
    drive()
    assert view(wf).result == {"charged": ["n0", "n1"], "key": f"{wf}:op:1"}


def test_the_duty_leaves_healthy_and_busy_executions_alone() -> None:
    done = start("vanish-checkout", "vanish-charge")
    drive()
    waiting = start("vanish-checkout", "vanish-unsure")
    drive()
    Job.objects.filter(pk=op_job(done).pk).delete()  # evicted after its outcome: fine
    fresh = start("vanish-checkout", "vanish-charge")
    testing.run_one()
    Job.objects.filter(pk=op_job(fresh).pk).delete()  # vanished, but not idle yet
    idle(done)
    idle(waiting)
    assert duties.reconcile()["restored"] == 0
    assert not Job.objects.filter(pk=f"{fresh}:op:1").exists()

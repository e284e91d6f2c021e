"""Ids under ``sched:`` belong to schedules' ticks: a caller cannot take one, so it can
neither pre-empt a future tick (the scheduler would take the tick as fired and skip its
real target) nor forge a handler's ``ctx.periodic_origin``; the scheduler's own writes,
and grafts onto the workflows it starts, still go through."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import override_settings

from headgate_django import ReservedIdError, durable, enqueue, schedules, testing
from headgate_django.kernel.schedule_origin import tick_id
from headgate_django.kernel.schedule_spec import parse_spec, previous_ticks
from headgate_django.models import Execution, Job, Schedule
from headgate_django.schedules.scheduler import run_pass
from headgate_django.store import db_now
from headgate_django.workflows import Workflow, WorkflowGraft
from tests.app import tasks
from tests.app.models import Execution as Ran

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clear_of_the_hour")]
#: The current hour's tick is on time, so a pass starts it (whatever ``on_missed`` says).
LONG_GRACE = override_settings(HEADGATE={"SCHEDULE_GRACE": timedelta(days=1)})


def _next_tick(name: str, spec: str = "@every 1h") -> str:
    """The id the schedule ``name`` gives its next tick (its current hour's, rewound)."""
    current = previous_ticks(parse_spec(spec), db_now(), 1)[0]
    Schedule.objects.filter(name=name).update(next_run_at=current)
    return tick_id(name, current)


@LONG_GRACE
def test_a_caller_cannot_take_a_future_ticks_job_id_and_the_tick_still_fires():
    schedules.upsert("hourly", "@every 1h", tasks.periodic.envelope())
    ident = _next_tick("hourly")
    forged = replace(tasks.echo.envelope(value="not the schedule's"), id=ident)
    with pytest.raises(ReservedIdError, match="reserved for the ids of schedules' ticks"):
        enqueue(forged)
    assert not Job.objects.exists()
    assert run_pass() == {"enqueued": 1}
    assert Job.objects.get(pk=ident).kind == tasks.periodic.kind  # the real target
    testing.run_jobs()
    assert Ran.objects.count() == 1  # the handler ran, with the tick's real origin


def test_a_caller_cannot_forge_an_origin_through_a_workflow_id():
    env = replace(tasks.echo.envelope(value=1), workflow_id="sched:hourly:0")
    with pytest.raises(ReservedIdError, match="workflow id 'sched:hourly:0'"):
        enqueue(env)
    assert not Job.objects.exists()


def test_a_workflow_cannot_take_a_reserved_id_or_give_one_to_a_node():
    with pytest.raises(ReservedIdError):
        Workflow("sched:wf:0")
    node = replace(tasks.echo.envelope(value=1), id="sched:wf:0")
    with pytest.raises(ReservedIdError, match="job id 'sched:wf:0'"):
        Workflow("plain").add("a", node, []).prepare()
    assert not Job.objects.exists()


def test_a_durable_start_cannot_take_a_reserved_workflow_id_or_business_key():
    client = durable.Client()
    with pytest.raises(ReservedIdError, match="workflow id"):
        client.start("test-scheduled", "1", {"n": 1}, workflow_id="sched:dur:0")
    with pytest.raises(ReservedIdError, match="business idempotency key"):
        client.start("test-scheduled", "1", {"n": 1}, business_idempotency_key="sched:dur:0")
    with pytest.raises(ReservedIdError, match="business idempotency key"):
        client.signal_with_start(
            "test-scheduled", "1", {"n": 1}, "go", business_idempotency_key="sched:dur:0"
        )
    assert not Execution.objects.exists()


@LONG_GRACE
def test_the_scheduler_still_starts_workflow_and_durable_ticks():
    schedules.upsert("wf", "@every 1h", schedules.workflow("test-nightly-import"))
    schedules.upsert("dur", "@every 1h", schedules.durable("test-scheduled", "1", {"n": 1}))
    workflow_id, execution_id = _next_tick("wf"), _next_tick("dur")
    assert run_pass() == {"enqueued": 2}
    assert Job.objects.filter(pk=f"{workflow_id}:coordinator").exists()
    assert Execution.objects.get().business_idempotency_key == execution_id
    # run_now writes a tick id of its own (with a suffix) the same way
    assert schedules.run_now("wf").startswith("sched:wf:")


@LONG_GRACE
def test_a_graft_onto_a_ticks_workflow_still_works_but_not_under_another_tick():
    schedules.upsert("wf", "@every 1h", schedules.workflow("test-nightly-import"))
    workflow_id = _next_tick("wf")
    run_pass()
    graft = WorkflowGraft(workflow_id, 1).add("more", tasks.echo.envelope(value=2), ["run"])
    enqueue(graft.prepare())
    assert Job.objects.filter(pk=f"{workflow_id}:more").exists()
    stolen = replace(tasks.echo.envelope(value=3), id="sched:other:0")
    with pytest.raises(ReservedIdError):
        enqueue(WorkflowGraft(workflow_id, 1).add("x", stolen, ["run"]).prepare())
    assert not Job.objects.filter(pk="sched:other:0").exists()


def test_a_node_id_made_of_a_workflow_id_and_a_node_name_cannot_take_a_tick_id():
    for wf in (
        Workflow("sched").add_signal("x:5", "go"),
        Workflow("sched").add_timer_at("x:5", 0),
        Workflow("sched").add("x:5", tasks.echo.envelope(value=1), []),
    ):
        with pytest.raises(ReservedIdError, match="job id 'sched:x:5'"):
            wf.prepare()


def test_a_graft_onto_a_workflow_called_sched_cannot_add_a_tick_id():
    node = replace(tasks.echo.envelope(value=1), id="plain-a")
    enqueue(Workflow("sched").add("a", node, []).prepare())
    graft = WorkflowGraft("sched", 1).add("x:5", tasks.echo.envelope(value=2), ["a"])
    with pytest.raises(ReservedIdError, match="job id 'sched:x:5'"):
        enqueue(graft.prepare())
    assert not Job.objects.filter(pk="sched:x:5").exists()

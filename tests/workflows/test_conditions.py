"""CEL condition nodes: compiled at prepare (size, syntax, boolean), re-evaluated on each
tick while false, and an evaluation error fails the node with the error as its reason."""

from __future__ import annotations

import pytest

from headgate_django import DefinitionError, enqueue, testing
from headgate_django.exceptions import ConditionError
from headgate_django.models import Job
from headgate_django.workflows import SignalEmission, Workflow, emit_signal_with, workflow_events
from tests.app import tasks
from tests.workflows.helpers import (
    coordinator,
    event_names,
    job,
    job_state,
    last_error,
    node_states,
    run,
    runs,
)


def approval(expression: str) -> Workflow:
    return (
        Workflow("approval:42")
        .add("prepare", tasks.echo.envelope(), [])
        .add_condition("eligible", expression, ["prepare"])
        .add("after", tasks.record_run.envelope(label="after"), ["eligible"])
    )


@pytest.mark.django_db
def test_a_true_condition_releases_its_dependents():
    enqueue(approval("completed.prepare && states.prepare == 'completed'").prepare())
    run()
    assert coordinator("approval:42").state == "completed"
    assert node_states("approval:42") == dict.fromkeys(
        ["prepare", "eligible", "after"], "completed"
    )
    assert "condition_satisfied" in event_names("approval:42")


@pytest.mark.django_db
def test_revision_and_generation_are_unsigned_variables():
    enqueue(approval("revision == 1u && generation == 1u && !completed.after").prepare())
    run()
    assert coordinator("approval:42").state == "completed"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("completed.prepare" + " " * (1025 - len("completed.prepare")), "limited to 1024 bytes"),
        ("é" * 512 + "x", "limited to 1024 bytes"),
        ("1 + 2", "can never return a boolean"),
        ("'approved'", "can never return a boolean"),
        ("states.prepare", "not a boolean"),
        ("revision", "not a boolean"),
        ("completed.prepare &&", "not valid CEL"),
        ("now > 0", "unknown variable or function"),
        ("http_get('https://example.com') == 'ok'", "unknown variable or function"),
        ("", "must not be empty"),
    ],
    ids=[
        "1025 bytes",
        "1025 utf-8 bytes",
        "arithmetic",
        "string",
        "a state string",
        "an integer",
        "syntax",
        "unknown variable",
        "no i/o",
        "empty",
    ],
)
def test_invalid_conditions_are_refused_at_prepare(expression, message):
    with pytest.raises(ConditionError) as info:
        enqueue(approval(expression).prepare())
    assert isinstance(info.value, DefinitionError)
    assert message in str(info.value)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_1024_byte_condition_is_accepted():
    expression = "completed.prepare" + " " * (1024 - len("completed.prepare"))
    enqueue(approval(expression).prepare())
    run()
    assert coordinator("approval:42").state == "completed"


@pytest.mark.django_db
def test_a_false_condition_waits_and_runs_after_a_later_completion():
    enqueue(
        Workflow("gate")
        .add("a", tasks.echo.envelope(), [])
        .add("b", tasks.snooze_once.envelope(seconds=3600), [])
        .add_condition("ready", "completed.b && states.b == 'completed'", ["a"])
        .add("after", tasks.record_run.envelope(label="after"), ["ready"])
        .prepare()
    )
    testing.run_jobs()  # a completes; b snoozes for an hour
    assert job_state("gate:a") == "completed"
    assert job_state("gate:b") == "scheduled"
    # Its dependency is complete but the expression is false: it stays pending.
    assert job_state("gate:ready") == "pending"
    assert runs("gate:after") == []

    testing.run_jobs()  # more ticks change nothing while b waits
    assert job_state("gate:ready") == "pending"

    run()  # b completes; the next tick finds the condition true
    assert job_state("gate:ready") == "completed"
    assert [r.label for r in runs("gate:after")] == ["after"]
    assert runs("gate:after")[0].id > runs("gate:b")[-1].id
    assert coordinator("gate").state == "completed"


@pytest.mark.django_db
def test_an_evaluation_error_fails_the_node_with_the_error_as_reason():
    # Compiles (any node name could exist) but fails on this graph: no node "ghost".
    enqueue(approval("states.ghost == 'completed'").prepare())
    run()
    assert job_state("approval:42:eligible") == "cancelled"
    error = job("approval:42:eligible").errors[-1]
    assert error["kind"] == "condition"
    assert "states.ghost == 'completed'" in error["error"]
    assert job_state("approval:42:after") is None  # never ran: deleted
    assert coordinator("approval:42").state == "archived"
    assert last_error("approval:42:coordinator") == "node 'eligible' is cancelled"
    failed = [e for e in workflow_events("approval:42") if e["event"] == "condition_failed"]
    assert len(failed) == 1 and "ghost" in failed[0]["reason"]


@pytest.mark.django_db
def test_a_buffered_signal_is_pending_to_conditions_until_it_is_consumed():
    enqueue(
        Workflow("buffer")
        .add("prepare", tasks.snooze_once.envelope(seconds=3600), [])
        .add_signal("approval", "approved", ["prepare"])
        .add_condition("seen", "states.approval == 'completed' || completed.approval", [])
        .add("after", tasks.record_run.envelope(label="after"), ["seen"])
        .prepare()
    )
    emit_signal_with("buffer", SignalEmission("approved", "early"))
    testing.run_jobs()
    assert job_state("buffer:approval") == "completed"  # the signal job ran early...
    assert job_state("buffer:seen") == "pending"  # ...but the workflow has not consumed it
    assert runs("buffer:after") == []
    run()
    assert job_state("buffer:seen") == "completed"
    assert runs("buffer:after")[0].id > runs("buffer:prepare")[-1].id

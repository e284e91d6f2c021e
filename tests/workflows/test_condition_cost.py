"""A condition's cost is bounded before it can hold a coordinator tick: prepare refuses an
expression over the budget, and a graft that grows the workflow until a condition over
``states``/``completed`` would cost more than the budget is rejected."""

from __future__ import annotations

import pytest

from headgate_django import enqueue
from headgate_django.exceptions import ConditionError
from headgate_django.kernel.cel import MAX_EVALUATION_STEPS
from headgate_django.models import Graft, Job, WorkflowCheckpoint
from headgate_django.workflows import (
    SignalEmission,
    Workflow,
    WorkflowGraft,
    emit_signal_with,
    inspect_workflow,
)
from tests.app import tasks
from tests.workflows.helpers import coordinator, job_state, run

TEN = "[0,1,2,3,4,5,6,7,8,9]"


def nested(levels: int) -> str:
    expression = "true"
    for name in "edcba"[-levels:]:
        expression = f"{TEN}.all({name}, {expression})"
    return expression


OVER_BUDGET = {
    "3 nested comprehensions": nested(3),
    "5 nested comprehensions": nested(5),
    "map over map": f"size({TEN}.map(a, {TEN}.map(b, {TEN}.filter(c, c > a + b)))) > 0",
    "a long literal list iterated": "[" + ",".join(["1"] * 200) + "].exists(x, x == 2)",
    "pairs of nodes": "states.all(a, states.all(b, a == b || states[a] != 'failed'))",
}


@pytest.mark.django_db
@pytest.mark.parametrize("expression", OVER_BUDGET.values(), ids=OVER_BUDGET.keys())
def test_an_over_budget_condition_is_refused_at_prepare(expression):
    workflow = Workflow("costly").add("prepare", tasks.echo.envelope(), [])
    for i in range(30):  # ``states`` and ``completed`` have one entry per node
        workflow.add(f"step-{i}", tasks.echo.envelope(), ["prepare"])
    workflow.add_condition("gate", expression, ["prepare"])
    with pytest.raises(ConditionError) as info:
        enqueue(workflow.prepare())
    assert info.value.node == "gate"
    assert "too expensive" in info.value.message
    assert f"budget of {MAX_EVALUATION_STEPS:,}" in info.value.message
    assert not Job.objects.exists()
    assert not WorkflowCheckpoint.objects.exists()


def gated() -> Workflow:
    """start → gate (any node completed?), held open by a signal so grafts can arrive."""
    return (
        Workflow("gated")
        .add("start", tasks.record_run.envelope(label="start"), [])
        .add_condition("gate", "completed.exists(n, completed[n])", ["start"])
        .add_signal("hold", "done", ["start"])
    )


@pytest.mark.django_db
def test_a_graft_that_would_put_a_condition_over_budget_is_refused_at_submission():
    enqueue(gated().prepare())
    run()
    assert job_state("gated:gate") == "completed"
    graft = WorkflowGraft("gated", 1)
    for i in range(80):
        graft.add(f"extra-{i}", tasks.record_run.envelope(label="extra"), ["start"])
    with pytest.raises(ConditionError) as info:
        enqueue(graft.prepare())
    reason = str(info.value)
    assert "too expensive" in reason and "in a workflow of 83 nodes" in reason
    assert f"budget of {MAX_EVALUATION_STEPS:,}" in reason
    assert not Graft.objects.exists()
    assert not Job.objects.filter(id__startswith="gated:extra-").exists()
    assert job_state("gated:graft:2") is None
    emit_signal_with("gated", SignalEmission("done", "done"))
    run()
    snapshot = inspect_workflow("gated")
    assert snapshot.revision == 1
    assert [n.name for n in snapshot.nodes] == ["start", "gate", "hold"]
    assert coordinator("gated").state == "completed"


@pytest.mark.django_db
def test_a_small_graft_keeps_the_condition_within_budget():
    enqueue(gated().prepare())
    run()
    enqueue(
        WorkflowGraft("gated", 1)
        .add("extra", tasks.record_run.envelope(label="extra"), ["start"])
        .prepare()
    )
    emit_signal_with("gated", SignalEmission("done", "done"))
    run()
    assert Graft.objects.get(receipt_job_id="gated:graft:2").status == "accepted"
    assert job_state("gated:extra") == "completed"
    assert coordinator("gated").state == "completed"

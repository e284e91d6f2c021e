"""A coordinator revalidates its stored graph on every tick: a forged or corrupted payload
archives the coordinator with a reason before any node is touched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from headgate_django import enqueue, testing
from headgate_django.envelope import decode_call, encode_call
from headgate_django.models import Job, WorkflowCheckpoint
from headgate_django.store.maintenance import job_make_due
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.workflows.helpers import coordinator, last_error, run, runs

COLUMNS = ("id", "state", "scheduled_at", "attempt", "fence", "finalized_at", "payload")


def nodes_of(workflow_id: str) -> list[tuple[Any, ...]]:
    return list(
        Job.objects.filter(workflow_id=workflow_id)
        .exclude(kind="headgate:workflow")
        .order_by("id")
        .values_list(*COLUMNS)
    )


def forge(workflow_id: str, change: Callable[[dict[str, Any]], Any]) -> None:
    """Rewrite the stored coordinator payload as someone with database access could."""
    row = coordinator(workflow_id)
    _, kwargs = decode_call(bytes(row.payload))
    change(kwargs["graph"])
    Job.objects.filter(pk=row.pk).update(payload=encode_call((), kwargs))


def started(workflow_id: str) -> None:
    """a → b → c, run until a completed and the coordinator recorded it and promoted b."""
    enqueue(
        Workflow(workflow_id)
        .add("a", tasks.record_run.envelope(label="a"), [])
        .add("b", tasks.record_run.envelope(label="b"), ["a"])
        .add("c", tasks.record_run.envelope(label="c"), ["b"])
        .prepare()
    )
    testing.run_one(queues=["headgate-workflow"])  # promotes a
    testing.run_one(queues=["default"])  # a completes
    testing.run_one(queues=["headgate-workflow"])  # records a, promotes b


def _cycle(graph: dict[str, Any]) -> None:
    graph["nodes"][0]["deps"] = ["c"]  # a → b → c → a


def _too_many(graph: dict[str, Any]) -> None:
    template = graph["nodes"][-1]
    graph["nodes"] += [
        {**template, "name": f"x{i}", "job_id": f"x{i}", "deps": []} for i in range(1000)
    ]


def _unknown_dep(graph: dict[str, Any]) -> None:
    graph["nodes"][2]["deps"] = ["ghost"]


def _duplicate(graph: dict[str, Any]) -> None:
    graph["nodes"][2]["name"] = "a"


def _wrong_type(graph: dict[str, Any]) -> None:
    graph["nodes"][1]["deps"] = "a"


def _bad_condition(graph: dict[str, Any]) -> None:
    graph["nodes"][2].update(kind="condition", condition="1 +", job_kind="headgate:condition")


def _expensive_condition(graph: dict[str, Any]) -> None:
    # Ten billion body evaluations in 154 bytes: refused by its cost, never evaluated.
    ten = "[0,1,2,3,4,5,6,7,8,9]"
    expression = "true"
    for name in "edcba":
        expression = f"{ten}.all({name}, {expression})"
    graph["nodes"][2].update(kind="condition", condition=expression, job_kind="headgate:condition")


def _other_workflow(graph: dict[str, Any]) -> None:
    graph["workflow_id"] = "someone-else"


FORGERIES = {
    "cycle": (_cycle, "cycle"),
    "1,000 extra nodes": (_too_many, "more than 999"),
    "unknown dependency": (_unknown_dep, "'ghost', which is not declared"),
    "duplicate name": (_duplicate, "declared twice"),
    "deps not a list": (_wrong_type, "deps must be a list"),
    "invalid condition": (_bad_condition, "not valid CEL"),
    "over-budget condition": (_expensive_condition, "too expensive"),
    "another workflow's graph": (_other_workflow, "does not belong to workflow"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_graph_archives_the_coordinator_and_touches_no_node(forgery):
    change, reason = FORGERIES[forgery]
    started("wf")
    nodes_before = nodes_of("wf")
    checkpoint_before = WorkflowCheckpoint.objects.filter(pk="wf").values().get()
    assert [state for _, state, *_ in nodes_before] == ["completed", "available", "pending"]

    forge("wf", change)
    job_make_due(queues=["headgate-workflow"])
    # Only the coordinator may run: b stays available so "untouched" is visible.
    assert testing.run_one(queues=["headgate-workflow"]) == ("wf:coordinator", "skipped")

    assert coordinator("wf").state == "archived"
    assert reason in last_error("wf:coordinator")
    assert nodes_of("wf") == nodes_before
    assert WorkflowCheckpoint.objects.filter(pk="wf").values().get() == checkpoint_before


@pytest.mark.django_db
def test_a_cycle_forged_before_the_first_tick_is_refused_before_anything_runs():
    enqueue(
        Workflow("fresh")
        .add("a", tasks.record_run.envelope(), [])
        .add("b", tasks.record_run.envelope(), ["a"])
        .prepare()
    )
    forge("fresh", lambda graph: graph["nodes"][0].update(deps=["b"]))
    run()
    assert coordinator("fresh").state == "archived"
    assert "invalid workflow graph: the graph has a cycle" in last_error("fresh:coordinator")
    assert set(Job.objects.filter(workflow_id="fresh").values_list("state", flat=True)) == {
        "archived",
        "pending",
    }
    assert runs("fresh:a") == [] and runs("fresh:b") == []
    assert not WorkflowCheckpoint.objects.filter(pk="fresh").exists()


@pytest.mark.django_db
def test_an_undecodable_coordinator_payload_touches_no_node():
    started("raw")
    nodes_before = nodes_of("raw")
    Job.objects.filter(pk="raw:coordinator").update(payload=b"\xff not json")
    job_make_due(queues=["headgate-workflow"])
    testing.run_one(queues=["headgate-workflow"])
    assert coordinator("raw").state == "undecodable"
    assert nodes_of("raw") == nodes_before

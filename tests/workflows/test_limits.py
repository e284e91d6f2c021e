"""Graph limits: the largest shapes complete, every invalid one is refused with a clear
``DefinitionError`` before anything is enqueued, and a tick's reads stay set-based."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from headgate_django import DefinitionError, enqueue, testing
from headgate_django.exceptions import (
    CycleError,
    DuplicateNodeError,
    GraphError,
    GraphLimitError,
    PayloadTooLargeError,
    UnknownDependencyError,
)
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow, workflow_events
from tests.app import tasks
from tests.workflows.helpers import checkpoint, coordinator, job, run

NOOP = tasks.noop.envelope()


def layered(count: int = 999, edges: int = 10_000, workflow_id: str = "big") -> Workflow:
    """``count`` nodes in layers of 100; each node of a layer depends on 11 nodes of the
    layer before, and the first nodes of the last layer get extra edges two layers back
    until the graph has exactly ``edges`` edges."""
    names = [f"n{i}" for i in range(count)]
    deps: list[list[str]] = []
    for i in range(count):
        layer = i // 100
        previous = range((layer - 1) * 100, layer * 100)
        deps.append([] if layer == 0 else [names[previous[(i + 7 * k) % 100]] for k in range(11)])
    missing = edges - sum(map(len, deps))
    i = count - 1
    while missing > 0:
        older = [names[j] for j in range(((i // 100) - 2) * 100, ((i // 100) - 1) * 100)]
        extra = older[: min(missing, len(older))]
        deps[i] += extra
        missing -= len(extra)
        i -= 1
    workflow = Workflow(workflow_id).coordinator_queue("big")
    for name, node_deps in zip(names, deps, strict=True):
        workflow.add(name, NOOP, node_deps)
    return workflow


@pytest.mark.django_db
def test_fan_out_500_then_fan_in_completes():
    workflow = Workflow("fan").add("split", NOOP, [])
    middle = [f"part-{i}" for i in range(500)]
    for name in middle:
        workflow.add(name, NOOP, ["split"])
    workflow.add("join", NOOP, middle)
    enqueue(workflow.prepare())
    report = run()
    assert report.counts["completed"] == 503, report.counts
    snapshot = inspect_workflow("fan")
    assert snapshot.coordinator_state == "completed"
    assert {n.state for n in snapshot.nodes} == {"completed"}
    assert snapshot.dependents("split") == middle
    assert snapshot.dependencies("join") == middle
    join = job("fan:join")
    last_part = max(job(f"fan:{name}").finalized_at for name in middle)
    assert join.claimed_at >= last_part
    assert len(checkpoint("fan").completed) == 502
    # History keeps the newest 256 of its 504 events (workflow_started, 502 node_completed,
    # workflow_succeeded), with the sequence still counting every event.
    events = workflow_events("fan")
    assert len(events) == 256
    assert [e["sequence"] for e in events] == list(range(504 - 255, 505))
    assert events[-1]["event"] == "workflow_succeeded"
    assert {e["event"] for e in events[:-1]} == {"node_completed"}
    assert events[-2]["node"] == "join"
    assert all(e["revision"] == 1 and e["generation"] == 1 for e in events)
    assert all(isinstance(e["at_ms"], int) for e in events)


@pytest.mark.django_db
def test_largest_valid_graph_prepares_and_completes():
    batch = layered().prepare()
    assert len(batch.graph.nodes) == 999
    assert sum(len(n.deps) for n in batch.graph.nodes) == 10_000
    enqueue(batch)
    assert Job.objects.filter(workflow_id="big").count() == 1000
    report = run()
    assert report.counts["completed"] == 1000, report.counts
    assert coordinator("big").state == "completed"
    assert len(checkpoint("big").completed) == 999
    assert not Job.objects.filter(workflow_id="big").exclude(state="completed").exists()


def _chain(workflow: Workflow, count: int) -> Workflow:
    workflow.add("n0", NOOP, [])
    for i in range(1, count):
        workflow.add(f"n{i}", NOOP, [f"n{i - 1}"])
    return workflow


INVALID: dict[str, tuple[Callable[[], Workflow], type[DefinitionError], str]] = {
    "1,000 nodes": (
        lambda: _chain(Workflow("bad"), 1000),
        GraphLimitError,
        "1000 nodes, more than 999",
    ),
    "10,001 edges": (
        lambda: layered(edges=10_001, workflow_id="bad"),
        GraphLimitError,
        "10001 dependency edges, more than 10000",
    ),
    "129-byte name": (
        # 64 two-byte characters and one ASCII: 65 characters, 129 bytes.
        lambda: Workflow("bad").add("é" * 64 + "x", NOOP, []),
        GraphLimitError,
        "must be 1 to 128 bytes of UTF-8, got 129",
    ),
    "cycle": (
        lambda: (
            Workflow("bad")
            .add("a", NOOP, ["c"])
            .add("b", NOOP, ["a"])
            .add("c", NOOP, ["b"])
            .add("d", NOOP, [])
        ),
        CycleError,
        "cycle",
    ),
    "unknown dependency": (
        lambda: Workflow("bad").add("a", NOOP, []).add("b", NOOP, ["ghost"]),
        UnknownDependencyError,
        "node 'b' depends on 'ghost', which is not declared",
    ),
    "duplicate name": (
        lambda: Workflow("bad").add("a", NOOP, []).add("a", NOOP, []),
        DuplicateNodeError,
        "node 'a' is declared twice",
    ),
    "repeated dependency": (
        lambda: Workflow("bad").add("a", NOOP, []).add("b", NOOP, ["a", "a"]),
        GraphError,
        "node 'b' lists 'a' twice",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", INVALID)
def test_invalid_graph_is_refused_and_nothing_is_enqueued(case):
    build, error, message = INVALID[case]
    workflow = build()
    with pytest.raises(error) as info:
        enqueue(workflow.prepare())
    assert isinstance(info.value, DefinitionError)
    assert message in str(info.value)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_cycle_error_names_the_nodes_on_the_cycle():
    with pytest.raises(CycleError) as info:
        Workflow("bad").add("a", NOOP, ["c"]).add("b", NOOP, ["a"]).add("c", NOOP, ["b"]).prepare()
    assert set(info.value.details["cycle"]) == {"a", "b", "c"}
    assert info.value.details["node"] in {"a", "b", "c"}
    assert re.search(r"[abc] -> [abc] -> [abc] -> [abc]", str(info.value))


@pytest.mark.django_db
def test_the_limits_themselves_are_accepted():
    name = "é" * 64  # exactly 128 bytes
    enqueue(Workflow("edge").add(name, NOOP, []).prepare())
    run()
    assert inspect_workflow("edge").node(name).state == "completed"
    assert len(_chain(Workflow("long"), 999).prepare().graph.nodes) == 999


def _headgate_job_queries(size: int) -> list[str]:
    workflow = Workflow(f"reads-{size}").coordinator_queue(f"reads-{size}")
    workflow.add("root", NOOP, [])
    for i in range(size - 1):
        workflow.add(f"leaf-{i}", NOOP, ["root"])
    enqueue(workflow.prepare())
    testing.run_one(queues=[f"reads-{size}"])  # first tick: promotes root
    testing.run_jobs(queues=["default"])  # root completes, wakes the coordinator
    with CaptureQueriesContext(connection) as captured:
        assert testing.run_one(queues=[f"reads-{size}"])[1] == "snoozed"
    assert Job.objects.filter(workflow_id=f"reads-{size}", state="available").count() == size - 1
    return [q["sql"] for q in captured.captured_queries if "headgate_job" in q["sql"]]


@pytest.mark.django_db
@pytest.mark.usefixtures("unprepared")
def test_a_tick_reads_nodes_in_bounded_set_based_queries():
    small = _headgate_job_queries(10)
    large = _headgate_job_queries(600)
    # 600 nodes need one more 500-id chunk per pass than 10 nodes, never a query per node.
    assert len(small) <= len(large) <= len(small) + 4, (len(small), len(large))
    node_reads = [q for q in large if re.search(r"SELECT .*finalized_at.* IN \(", q)]
    assert node_reads, large
    assert max(q.count("'reads-600:") for q in node_reads) == 500  # chunks of 500 ids


@pytest.mark.parametrize(
    "child",
    ["x\x00", "billing\n42", "c" * 244],
    ids=["nul", "newline", "too-long-for-its-coordinator-id"],
)
def test_a_child_link_must_name_a_possible_workflow_id(child):
    with pytest.raises(GraphError, match="cannot be a workflow id"):
        Workflow("parent:1").add_child("billing", child, []).prepare()


def test_a_signal_name_may_not_contain_control_characters():
    with pytest.raises(GraphError, match="control characters"):
        Workflow("w:1").add_signal("s", "go\x00", []).prepare()


def test_a_graph_within_every_field_limit_but_too_large_to_store_is_refused_at_prepare():
    """999 nodes with 128-byte names and 1,000-byte conditions make a graph of about 1.4 MB,
    over ``MAX_PAYLOAD_BYTES`` (1 MiB): refused when the workflow is prepared, with the size
    and the limit, rather than by ``enqueue`` for a job the user never named."""
    expression = f'"{"x" * 990}" != ""'  # 998 bytes
    workflow = Workflow("too-large-to-store")
    for i in range(999):
        workflow.add_condition(f"{i:03d}-{'n' * 124}", expression)
    with pytest.raises(PayloadTooLargeError) as info:
        workflow.prepare()
    assert info.value.details["limit"] == 1_048_576
    assert info.value.details["size"] > 1_048_576
    assert "workflow 'too-large-to-store'" in str(info.value)
    assert "MAX_PAYLOAD_BYTES" in str(info.value)

"""The workflow graph: every validation rule, each limit at its boundary, and the queries."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from headgate_django.exceptions import (
    ConditionError,
    CycleError,
    DuplicateNodeError,
    GraphError,
    GraphLimitError,
    UnknownDependencyError,
)
from headgate_django.kernel.graph import (
    MAX_EDGES,
    MAX_NAME_BYTES,
    MAX_NODES,
    GraphSpec,
    NodeKind,
    NodeSpec,
    combine,
    dependencies,
    dependents,
    dependents_map,
    failure_closure,
    ready_nodes,
    topological_order,
    validate,
)


def task(name: str, *deps: str, **extra: Any) -> NodeSpec:
    return NodeSpec(name, f"wf:{name}", NodeKind.TASK, deps, "app.task", **extra)


def node(name: str, kind: NodeKind, *deps: str, **extra: Any) -> NodeSpec:
    return NodeSpec(name, f"wf:{name}", kind, deps, f"headgate:{kind}", **extra)


def graph(*nodes: NodeSpec, workflow_id: str = "wf") -> GraphSpec:
    return GraphSpec(workflow_id, nodes)


def diamond() -> GraphSpec:
    return graph(task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c"))


def every_kind() -> GraphSpec:
    return graph(
        task("prepare"),
        node("approval", NodeKind.SIGNAL, "prepare", signal="approved"),
        node("window", NodeKind.TIMER, wake_at_ms=1_700_000_000_000),
        node("cooldown", NodeKind.TIMER, "approval", delay_ms=1_800_000),
        node("eligible", NodeKind.CONDITION, "prepare", condition="completed.prepare"),
        node("billing", NodeKind.CHILD_WORKFLOW, child_workflow_id="billing:42"),
        task("publish", "window", "cooldown", "eligible", "billing"),
    )


def chain(count: int) -> GraphSpec:
    nodes = [task("n0")] + [task(f"n{i}", f"n{i - 1}") for i in range(1, count)]
    return graph(*nodes)


def fan_in(roots: int, sinks: int, extra_edges: int = 0) -> GraphSpec:
    """``roots`` roots and ``sinks`` nodes that each depend on every root."""
    root_names = [f"r{i}" for i in range(roots)]
    nodes = [task(r) for r in root_names]
    nodes += [task(f"s{i}", *root_names) for i in range(sinks)]
    nodes += [task(f"x{i}", "r0") for i in range(extra_edges)]
    return graph(*nodes)


def raised(exc_type: type[Exception], function: Any, *args: Any) -> Any:
    with pytest.raises(exc_type) as info:
        function(*args)
    return info.value


# -- valid graphs --------------------------------------------------------------------


def test_node_kinds() -> None:
    assert [k.value for k in NodeKind] == [
        "task",
        "signal",
        "timer",
        "condition",
        "child_workflow",
    ]


def test_validate_returns_the_graph() -> None:
    g = diamond()
    assert validate(g) is g
    assert validate(every_kind()).nodes[4].condition == "completed.prepare"


def test_kind_given_as_string_is_converted() -> None:
    spec = NodeSpec("a", "wf:a", "signal", (), "k", signal="s")  # type: ignore[arg-type]
    assert spec.kind is NodeKind.SIGNAL


# -- limits --------------------------------------------------------------------------


def test_limits_are_the_documented_ones() -> None:
    assert (MAX_NODES, MAX_EDGES, MAX_NAME_BYTES) == (999, 10_000, 128)


def test_999_nodes_accepted_1000_refused() -> None:
    validate(chain(999))
    error = raised(GraphLimitError, validate, chain(1000))
    assert "1000 nodes" in error.message


def test_a_999_node_chain_orders_without_recursion() -> None:
    order = topological_order(validate(chain(999)))
    assert order == [f"n{i}" for i in range(999)]
    assert failure_closure(chain(999), {"n0"}) == {f"n{i}" for i in range(999)}


def test_10000_edges_accepted_10001_refused() -> None:
    at_limit = fan_in(100, 100)
    assert sum(len(n.deps) for n in at_limit.nodes) == 10_000
    validate(at_limit)
    over = fan_in(100, 100, extra_edges=1)
    error = raised(GraphLimitError, validate, over)
    assert "10001" in error.message


def test_edge_limit_on_a_full_size_graph() -> None:
    # 999 nodes: 100 roots, 100 nodes depending on every root, then a 799-node chain.
    g = fan_in(100, 100)
    tail = [task("t0", "s0")] + [task(f"t{i}", f"t{i - 1}") for i in range(1, 799)]
    full = graph(*g.nodes, *tail)
    assert len(full.nodes) == 999
    assert sum(len(n.deps) for n in full.nodes) == 10_799
    raised(GraphLimitError, validate, full)
    trimmed = graph(*fan_in(100, 92).nodes, *[task(f"u{i}") for i in range(807)])
    assert len(trimmed.nodes) == 999
    validate(trimmed)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a" * 128, True),
        ("a" * 129, False),
        ("é" * 64, True),  # 64 characters, 128 bytes
        ("é" * 64 + "a", False),  # 65 characters, 129 bytes
        ("€" * 43, False),  # 43 characters, 129 bytes
        ("€" * 42 + "ab", True),  # 44 characters, 128 bytes
    ],
)
def test_name_limit_counts_utf8_bytes(name: str, ok: bool) -> None:
    g = graph(task(name), task("after", name))
    if ok:
        assert validate(g) is g
    else:
        error = raised(GraphLimitError, validate, g)
        assert error.node == name


def test_empty_name_refused() -> None:
    error = raised(GraphError, validate, graph(task("")))
    assert not isinstance(error, GraphLimitError)
    assert error.node == ""


def test_name_that_is_not_utf8_refused() -> None:
    error = raised(GraphError, validate, graph(task("bad\ud800")))
    assert "UTF-8" in error.message


def test_name_with_a_nul_character_refused() -> None:
    # The name is a key of the checkpoint's evidence and appears in its history, both JSON:
    # PostgreSQL's jsonb holds no U+0000, so the coordinator failed every tick there. The
    # job id is explicit here: a default one (``{workflow}:{name}``) is refused anyway.
    named = NodeSpec("a\x00b", "wf:a", NodeKind.TASK, (), "app.task")
    error = raised(GraphError, validate, graph(named, task("after", "a\x00b")))
    assert "NUL" in error.message
    assert error.node == "a\x00b"


def test_graph_needs_a_node() -> None:
    error = raised(GraphError, validate, graph())
    assert "at least one node" in error.message


@pytest.mark.parametrize("workflow_id", ["", "x" * 256, "bad\udc00"])
def test_workflow_id_refused(workflow_id: str) -> None:
    raised(GraphError, validate, graph(task("a"), workflow_id=workflow_id))


def test_workflow_id_of_255_bytes_accepted() -> None:
    validate(graph(task("a"), workflow_id="x" * 255))


# -- structure -----------------------------------------------------------------------


def test_duplicate_name() -> None:
    nodes = (task("a"), NodeSpec("a", "other", NodeKind.TASK, (), "app.task"))
    error = raised(DuplicateNodeError, validate, GraphSpec("wf", nodes))
    assert error.node == "a"
    assert error.default_code == "duplicate_node"


def test_shared_job_id() -> None:
    nodes = (task("a"), NodeSpec("b", "wf:a", NodeKind.TASK, (), "app.task"))
    error = raised(DuplicateNodeError, validate, GraphSpec("wf", nodes))
    assert error.node == "b"


def test_unknown_dependency() -> None:
    error = raised(UnknownDependencyError, validate, graph(task("a"), task("b", "a", "ghost")))
    assert error.node == "b"
    assert "'ghost'" in error.message


def test_repeated_dependency() -> None:
    error = raised(GraphError, validate, graph(task("a"), task("b", "a", "a")))
    assert error.node == "b"
    assert "twice" in error.message


def test_self_dependency_is_a_cycle() -> None:
    error = raised(CycleError, validate, graph(task("a"), task("b", "a", "b")))
    assert error.node == "b"
    assert error.details["cycle"] == ["b", "b"]


def test_cycle_names_a_node_on_the_cycle() -> None:
    g = graph(
        task("root"),
        task("x", "root", "z"),
        task("y", "x"),
        task("z", "y"),
        task("downstream", "z"),
    )
    error = raised(CycleError, validate, g)
    assert error.node in {"x", "y", "z"}
    assert set(error.details["cycle"]) == {"x", "y", "z"}
    assert error.details["cycle"][0] == error.details["cycle"][-1]
    assert error.status_code == 422


def test_topological_order_refuses_a_cycle() -> None:
    raised(CycleError, topological_order, graph(task("a", "b"), task("b", "a")))


# -- kind-specific fields ------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (node("s", NodeKind.SIGNAL), "needs a signal name"),
        (node("s", NodeKind.SIGNAL, signal=""), "signal name"),
        (node("s", NodeKind.SIGNAL, signal="x" * 129), "signal name"),
        (node("t", NodeKind.TIMER), "exactly one of"),
        (node("t", NodeKind.TIMER, "a", wake_at_ms=1, delay_ms=1), "exactly one of"),
        (node("t", NodeKind.TIMER, delay_ms=1000), "needs a dependency"),
        (node("t", NodeKind.TIMER, "a", delay_ms=0), "delay_ms"),
        (node("t", NodeKind.TIMER, wake_at_ms=-1), "wake_at_ms"),
        (node("t", NodeKind.TIMER, wake_at_ms=2**63), "wake_at_ms"),
        (node("c", NodeKind.CONDITION, "a"), "needs a condition"),
        (node("k", NodeKind.CHILD_WORKFLOW), "needs a child workflow id"),
        (node("k", NodeKind.CHILD_WORKFLOW, child_workflow_id=""), "child workflow id"),
        (task("p", condition="true"), "must not set condition"),
        (task("p", signal="go"), "must not set signal"),
        (task("p", wake_at_ms=5), "must not set wake_at_ms"),
        (task("p", child_workflow_id="other"), "must not set child_workflow_id"),
        (node("s", NodeKind.SIGNAL, signal="go", delay_ms=5), "must not set delay_ms"),
        (node("t", NodeKind.TIMER, wake_at_ms=1, condition="true"), "must not set condition"),
    ],
)
def test_kind_field_consistency(bad: NodeSpec, fragment: str) -> None:
    error = raised(GraphError, validate, graph(task("a"), bad))
    assert error.node == bad.name
    assert fragment in error.message


def test_delay_timer_of_one_ms_with_a_dependency_accepted() -> None:
    validate(graph(task("a"), node("t", NodeKind.TIMER, "a", delay_ms=1)))


def test_condition_must_compile() -> None:
    bad = node("c", NodeKind.CONDITION, "a", condition="completed.a &&")
    error = raised(ConditionError, validate, graph(task("a"), bad))
    assert error.node == "c"
    assert error.message.startswith("node 'c': ")


def test_condition_must_be_boolean() -> None:
    bad = node("c", NodeKind.CONDITION, "a", condition="revision + 1u")
    raised(ConditionError, validate, graph(task("a"), bad))


def test_child_workflow_cannot_link_its_own_workflow() -> None:
    link = node("me", NodeKind.CHILD_WORKFLOW, child_workflow_id="wf")
    error = raised(CycleError, validate, graph(link))
    assert error.node == "me"


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (NodeSpec("a", "", NodeKind.TASK, (), "app.task"), "job id"),
        (NodeSpec("a", "wf:a", NodeKind.TASK, (), ""), "job kind"),
        (NodeSpec("a", "wf:a", NodeKind.TASK, (), "-starts-with-dash"), "job kind"),
    ],
)
def test_job_id_and_job_kind_checked(bad: NodeSpec, field: str) -> None:
    error = raised(GraphError, validate, graph(bad))
    assert error.node == "a"
    assert field in error.message


# -- construction type checks --------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": 1},
        {"deps": ["a"]},
        {"deps": (1,)},
        {"kind": "bogus"},
        {"kind": ["task"]},
        {"job_id": None},
        {"job_kind": 3},
        {"signal": 5},
        {"wake_at_ms": True},
        {"delay_ms": 1.5},
    ],
)
def test_node_spec_rejects_wrong_types(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "name": "a",
        "job_id": "wf:a",
        "kind": NodeKind.TASK,
        "deps": (),
        "job_kind": "app.task",
    }
    raised(GraphError, lambda: NodeSpec(**{**fields, **kwargs}))


def test_graph_spec_rejects_wrong_types() -> None:
    raised(GraphError, lambda: GraphSpec(7, (task("a"),)))  # type: ignore[arg-type]
    raised(GraphError, lambda: GraphSpec("wf", [task("a")]))  # type: ignore[arg-type]
    raised(GraphError, lambda: GraphSpec("wf", ({"name": "a"},)))  # type: ignore[arg-type]


# -- JSON ----------------------------------------------------------------------------


def test_json_round_trip() -> None:
    g = every_kind()
    data = json.loads(json.dumps(g.to_json()))
    assert GraphSpec.from_json(data) == g
    assert data["nodes"][3] == {
        "name": "cooldown",
        "job_id": "wf:cooldown",
        "kind": "timer",
        "deps": ["approval"],
        "job_kind": "headgate:timer",
        "signal": None,
        "wake_at_ms": None,
        "delay_ms": 1_800_000,
        "condition": None,
        "child_workflow_id": None,
    }


def test_json_optional_keys_may_be_absent_and_extra_top_level_keys_ignored() -> None:
    data = {
        "workflow_id": "wf",
        "retention_ms": 1000,
        "nodes": [{"name": "a", "job_id": "wf:a", "kind": "task", "deps": [], "job_kind": "k"}],
    }
    assert GraphSpec.from_json(data) == graph(NodeSpec("a", "wf:a", NodeKind.TASK, (), "k"))


def forged(change: Any) -> dict[str, Any]:
    data = diamond().to_json()
    change(data)
    return data


@pytest.mark.parametrize(
    ("data", "error_type"),
    [
        ([], GraphError),
        ("graph", GraphError),
        ({"nodes": []}, GraphError),
        ({"workflow_id": "wf"}, GraphError),
        ({"workflow_id": "wf", "nodes": {}}, GraphError),
        ({"workflow_id": 5, "nodes": [task("a").to_json()]}, GraphError),
        ({"workflow_id": "wf", "nodes": []}, GraphError),
        ({"workflow_id": "wf", "nodes": ["a"]}, GraphError),
        (forged(lambda d: d["nodes"][1].pop("deps")), GraphError),
        (forged(lambda d: d["nodes"][1].pop("job_id")), GraphError),
        (forged(lambda d: d["nodes"][1].update(deps="a")), GraphError),
        (forged(lambda d: d["nodes"][1].update(deps=[["a"]])), GraphError),
        (forged(lambda d: d["nodes"][1].update(name=17)), GraphError),
        (forged(lambda d: d["nodes"][1].update(kind=1)), GraphError),
        (forged(lambda d: d["nodes"][1].update(kind="shell")), GraphError),
        (forged(lambda d: d["nodes"][1].update(delay_ms="5")), GraphError),
        (forged(lambda d: d["nodes"][1].update(command="rm -rf /")), GraphError),
        (forged(lambda d: d["nodes"][0].update(deps=["d"])), CycleError),
        (forged(lambda d: d["nodes"][3].update(deps=["b", "e"])), UnknownDependencyError),
        (forged(lambda d: d["nodes"][3].update(name="a")), DuplicateNodeError),
        (forged(lambda d: d["nodes"].extend(copy.deepcopy(d["nodes"]) * 250)), GraphLimitError),
        (forged(lambda d: d["nodes"][0].update(deps=["x"] * 10_001)), GraphLimitError),
        (
            forged(lambda d: d["nodes"][1].update(kind="condition", condition="'x'")),
            ConditionError,
        ),
    ],
)
def test_forged_json_rejected(data: Any, error_type: type[Exception]) -> None:
    error = raised(GraphError, GraphSpec.from_json, data)
    assert type(error) is error_type


def test_forged_node_names_the_node() -> None:
    error = raised(GraphError, GraphSpec.from_json, forged(lambda d: d["nodes"][1].pop("deps")))
    assert error.node == "b"
    assert "deps" in error.message


# -- queries -------------------------------------------------------------------------


def test_topological_order_of_a_diamond() -> None:
    assert topological_order(diamond()) == ["a", "b", "c", "d"]


def test_topological_order_puts_dependencies_first_regardless_of_declaration() -> None:
    g = graph(task("late", "mid"), task("mid", "root"), task("other"), task("root"))
    assert topological_order(g) == ["other", "root", "mid", "late"]


def test_dependents_map_in_declaration_order() -> None:
    g = graph(task("a"), task("c", "a"), task("b", "a"), task("d", "b", "c"))
    assert dependents_map(g) == {"a": ["c", "b"], "c": ["d"], "b": ["d"], "d": []}


def test_dependents_map_returns_a_fresh_copy() -> None:
    g = diamond()
    dependents_map(g)["a"].append("zzz")
    assert dependents(g, "a") == ["b", "c"]


def test_dependencies_and_dependents() -> None:
    g = diamond()
    assert dependencies(g, "d") == ["b", "c"]
    assert dependencies(g, "a") == []
    assert dependents(g, "a") == ["b", "c"]
    assert dependents(g, "d") == []
    assert g.node("c").deps == ("a",)
    assert raised(GraphError, dependencies, g, "ghost").node == "ghost"
    raised(GraphError, dependents, g, "ghost")


def test_failure_closure_on_a_diamond() -> None:
    g = graph(*diamond().nodes, task("e"), task("f", "e"))
    assert failure_closure(g, {"b"}) == {"b", "d"}
    assert failure_closure(g, {"a"}) == {"a", "b", "c", "d"}
    assert failure_closure(g, {"b", "e"}) == {"b", "d", "e", "f"}
    assert failure_closure(g, {"d"}) == {"d"}
    assert failure_closure(g, set()) == set()
    raised(GraphError, failure_closure, g, {"ghost"})


def test_ready_nodes() -> None:
    g = graph(*diamond().nodes, task("e"))
    states = {"a": "pending", "b": "pending", "c": "pending", "d": "pending", "e": "pending"}
    assert ready_nodes(g, set(), states) == ["a", "e"]
    states.update(a="completed", e="running")
    assert ready_nodes(g, {"a"}, states) == ["b", "c"]
    states.update(b="completed", c="available")
    assert ready_nodes(g, {"a", "b"}, states) == []
    states.update(c="completed")
    assert ready_nodes(g, {"a", "b", "c"}, states) == ["d"]
    # A node already promoted is not ready again, and an unknown state is not pending.
    assert ready_nodes(g, {"a", "b", "c"}, {"d": "available"}) == []


def test_combine_appends_and_revalidates() -> None:
    base = diamond()
    combined = combine(base, [task("e", "d"), task("f", "e", "a")])
    assert [n.name for n in combined.nodes] == ["a", "b", "c", "d", "e", "f"]
    assert combined.workflow_id == "wf"
    assert [n.name for n in base.nodes] == ["a", "b", "c", "d"]
    assert failure_closure(combined, {"b"}) == {"b", "d", "e", "f"}


def test_combine_refuses_to_replace_an_accepted_node() -> None:
    error = raised(DuplicateNodeError, combine, diamond(), [task("e"), task("b")])
    assert error.node == "b"
    assert "already exists" in error.message


def test_combine_refuses_duplicates_inside_the_graft() -> None:
    raised(DuplicateNodeError, combine, diamond(), [task("e"), task("e")])


def test_combine_refuses_non_task_nodes() -> None:
    signal = node("s", NodeKind.SIGNAL, "a", signal="go")
    error = raised(GraphError, combine, diamond(), [signal])
    assert error.node == "s"
    assert "only task nodes" in error.message


def test_combine_refuses_an_empty_graft() -> None:
    raised(GraphError, combine, diamond(), [])


def test_combine_checks_the_combined_graph() -> None:
    raised(UnknownDependencyError, combine, diamond(), [task("e", "ghost")])
    raised(GraphLimitError, combine, chain(999), [task("extra")])

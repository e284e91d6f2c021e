"""The cost bound of CEL conditions: the static estimate refuses what a tick cannot afford,
the step limit stops what the estimate could not see, and compiling evaluates once."""

from __future__ import annotations

import pytest

from headgate_django.envelope import Envelope
from headgate_django.exceptions import ConditionError, ConditionEvaluationError, GraphLimitError
from headgate_django.kernel import cel, cel_cost, cel_runtime
from headgate_django.kernel.graph import (
    GraphSpec,
    NodeKind,
    NodeSpec,
    check_conditions_budget,
    combine,
    validate,
)
from headgate_django.kernel.workflow import Checkpoint, NodeRow, evaluate
from headgate_django.workflows import Workflow

TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"


def nested(levels: int, method: str = "all") -> str:
    """``TEN.all(a, TEN.all(b, … true))``: the issue's shape, 10**levels body evaluations."""
    names = "abcdefgh"
    expression = "true"
    for level in reversed(range(levels)):
        expression = f"{TEN}.{method}({names[level]}, {expression})"
    return expression


def names(count: int) -> dict[str, str]:
    return {f"node-{i}": "completed" for i in range(count)}


def estimate(expression: str, nodes: int = 0) -> int:
    tree = cel_runtime._get_environment().compile(expression)
    return cel_cost.estimate(tree, nodes)


def refused(expression: str, nodes: int = 0) -> str:
    with pytest.raises(ConditionError) as info:
        cel.compile(expression, nodes=nodes)
    return info.value.message


# -- the static estimate -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "nodes"),
    [
        ("completed.prepare && states['fraud-check'] == 'completed'", 4),
        ("revision == 3u && generation > 1u && size(states) == 2 && !completed.b", 999),
        ("states.exists(name, states[name] == 'archived')", 20),
        ("completed.all(n, completed[n])", 20),
        ("['a', 'b', 'c'].all(n, completed[n])", 999),
        ("'prepare' in states && states.prepare.startsWith('comp')", 999),
        (nested(1, "exists"), 0),
        ("[1, 2, 3].exists(a, [4, 5, 6].exists(b, a + 3 == b))", 0),
    ],
)
def test_ordinary_conditions_are_accepted(expression: str, nodes: int) -> None:
    assert estimate(expression, nodes) <= cel.MAX_EVALUATION_STEPS
    assert cel.compile(expression, nodes=nodes).source == expression


@pytest.mark.parametrize("method", ["all", "exists", "exists_one", "map", "filter"])
@pytest.mark.parametrize("levels", [2, 3, 4, 5, 6])
def test_nested_comprehensions_are_refused(levels: int, method: str) -> None:
    expression = nested(levels, method)
    if method in ("map", "filter"):
        expression = f"size({expression}) > 0"
    message = refused(expression)
    assert "too expensive" in message
    assert f"budget of {cel.MAX_EVALUATION_STEPS:,}" in message
    assert f"{estimate(expression):,} evaluation steps" in message


def test_nesting_multiplies_the_estimate() -> None:
    one, two, three = (estimate(nested(n)) for n in (1, 2, 3))
    assert 9 * one < two < 11 * one
    assert 9 * two < three < 11 * two


@pytest.mark.parametrize(
    "expression",
    [
        # A long literal list, iterated.
        "[" + ", ".join(["1"] * 120) + "].all(x, x == 1)",
        # Map and filter chains keep the size of their input.
        f"{TEN}.map(a, {TEN}.map(b, {TEN})).filter(l, l.exists(x, x > 8)).size() > 0",
        # Concatenation adds sizes: the iterated list has 40 elements, each a 10-list.
        f"({TEN} + {TEN} + {TEN} + {TEN}).all(a, {TEN}.all(b, a != b))",
        # Elements of nested literals are collections of known size.
        f"[{TEN}, {TEN}, {TEN}].all(l, l.all(a, l.all(b, a + b >= 0)))",
        # String growth inside nested comprehensions.
        "states.all(a, states.all(b, size(a + b + a + b) > 0))",
    ],
)
def test_other_adversarial_shapes_are_refused(expression: str) -> None:
    assert "too expensive" in refused(expression, nodes=30)


def test_input_collections_are_bounded_by_the_node_count() -> None:
    expression = "completed.all(n, completed[n])"
    small, large = estimate(expression, 10), estimate(expression, 100)
    assert small < cel.MAX_EVALUATION_STEPS < large
    cel.compile(expression, nodes=10)
    message = refused(expression, nodes=100)
    assert "in a workflow of 100 nodes" in message and f"{large:,}" in message


def test_reduce_is_refused() -> None:
    # Its accumulator doubles with ``r + r``: 2**999 characters over a full workflow.
    message = refused("size(states.reduce(r, k, 'a', r + r)) > 0")
    assert "reduce() is not available" in message


@pytest.mark.parametrize(
    ("expression", "nodes"),
    [
        ("completed.prepare && states['fraud-check'] == 'completed'", 2),
        ("states.exists(name, states[name] == 'archived')", 18),
        ("completed.all(n, completed[n]) ? true : false", 18),
        (nested(1), 0),
        ("[1, 2, 3].all(a, [4, 5, 6].all(b, a < b))", 0),
        (f"{TEN}.map(a, a * 2).filter(x, x > 3).size() > 0", 0),
        (f"[{TEN}, {TEN}].exists(l, l.exists(a, a == 10))", 0),
        ("states.map(k, k).filter(k, k.startsWith('n')).size() >= 0", 8),
    ],
)
def test_the_estimate_bounds_the_steps_counted_at_run_time(expression: str, nodes: int) -> None:
    compiled = cel.compile(expression, nodes=nodes)
    states = names(nodes) | {"fraud-check": "completed", "prepare": "completed"}
    activation = cel_runtime._activation(1, 1, states, dict.fromkeys(states, True))
    _, steps = cel_runtime.run(compiled.program, activation)
    assert 0 < steps <= estimate(expression, len(states))


# -- prepare and graft time (the graph validator passes the node count) ------------------


def graph(count: int, expression: str) -> GraphSpec:
    tasks = tuple(NodeSpec(f"t{i}", f"w:t{i}", NodeKind.TASK, (), "k") for i in range(count))
    condition = NodeSpec(
        "gate", "w:gate", NodeKind.CONDITION, ("t0",), "headgate:condition", condition=expression
    )
    return GraphSpec("w", (*tasks, condition))


def test_a_graft_that_grows_the_workflow_past_a_conditions_budget_is_refused() -> None:
    base = validate(graph(3, "completed.exists(n, completed[n])"))
    grafted = [NodeSpec(f"g{i}", f"w:g{i}", NodeKind.TASK, ("t0",), "k") for i in range(80)]
    with pytest.raises(ConditionError) as info:
        combine(base, grafted)
    assert info.value.node == "gate"
    assert f"budget of {cel.MAX_EVALUATION_STEPS:,}" in info.value.message
    assert "in a workflow of 84 nodes" in info.value.message


def gates(count: int, expression: str, tasks: int = 1) -> GraphSpec:
    """*count* condition nodes of *expression* behind *tasks* task nodes."""
    work = tuple(NodeSpec(f"t{i}", f"w:t{i}", NodeKind.TASK, (), "k") for i in range(tasks))
    conditions = tuple(
        NodeSpec(f"g{i}", f"w:g{i}", NodeKind.CONDITION, ("t0",), "c", condition=expression)
        for i in range(count)
    )
    return GraphSpec("w", (*work, *conditions))


#: About 840 steps whatever the graph's size: within one condition's budget.
COSTLY = "[" + ",".join(map(str, range(20))) + "].all(a, a >= 0)"


def test_conditions_that_together_cost_more_than_a_tick_may_spend_are_refused() -> None:
    # Each alone is within its budget; the coordinator may evaluate them all in one tick.
    each = estimate(COSTLY, 0)
    count = cel.MAX_WORKFLOW_EVALUATION_STEPS // each + 1
    assert each <= cel.MAX_EVALUATION_STEPS
    check_conditions_budget(validate(gates(count - 1, COSTLY)))
    with pytest.raises(GraphLimitError) as info:
        check_conditions_budget(validate(gates(count, COSTLY)))
    message = info.value.message
    assert f"{each * count:,} evaluation steps" in message
    assert f"budget of {cel.MAX_WORKFLOW_EVALUATION_STEPS:,} per workflow" in message


def test_prepare_refuses_a_workflow_over_the_conditions_budget() -> None:
    workflow = Workflow("budget").add("t0", Envelope(kind="k"))
    count = cel.MAX_WORKFLOW_EVALUATION_STEPS // estimate(COSTLY, 0) + 1
    for i in range(count):
        workflow.add_condition(f"g{i}", COSTLY, ["t0"])
    with pytest.raises(GraphLimitError, match="per workflow"):
        workflow.prepare()


def test_a_stored_graph_over_the_budget_still_loads() -> None:
    """The coordinator revalidates its stored graph on every tick: one accepted before the
    budget existed must keep running, not be archived as invalid."""
    count = cel.MAX_WORKFLOW_EVALUATION_STEPS // estimate(COSTLY, 0) + 1
    stored = gates(count, COSTLY).to_json()
    assert len(GraphSpec.from_json(stored).nodes) == count + 1


def test_many_cheap_conditions_fit_the_workflow_budget() -> None:
    spec = check_conditions_budget(validate(gates(998, "states.t0 == 'completed'")))
    assert len(spec.nodes) == 999


def test_a_condition_is_evaluated_once_per_state_of_the_workflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Polled while its input does not change, a false condition is not evaluated again.
    calls: list[str] = []
    original = cel_runtime.evaluate

    def counting(runner: object, source: str, *args: object) -> bool:
        calls.append(source)
        return original(runner, source, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cel_runtime, "evaluate", counting)
    expression = "states.t1 == 'completed' && revision >= 0"
    spec = validate(gates(2, expression, tasks=2))
    rows = {"t0": NodeRow("completed", 1), "t1": NodeRow("running")}
    rows |= {"g0": NodeRow("pending"), "g1": NodeRow("pending")}
    checkpoint = Checkpoint()
    for _ in range(3):
        assert evaluate(spec, checkpoint, rows).promote == []
    assert len(calls) == 1  # both nodes share the expression and the state
    rows["t1"] = NodeRow("completed", 2)
    assert sorted(evaluate(spec, checkpoint, rows).promote) == ["w:g0", "w:g1"]
    assert len(calls) == 2


# -- the runtime step limit --------------------------------------------------------------


def test_the_step_limit_stops_an_expression_on_a_large_input() -> None:
    expression = "completed.all(n, completed[n])"
    compiled = cel.compile(expression)  # no node count: the estimate sees empty maps
    big = names(999)
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(compiled, 1, 1, big, dict.fromkeys(big, True))
    assert f"stopped after {cel.MAX_EVALUATION_STEPS:,} evaluation steps" in info.value.message
    assert isinstance(info.value.__cause__, cel_runtime.StepLimitExceeded)


def test_the_step_limit_is_checked_inside_the_interpreter() -> None:
    compiled = cel.compile("completed.all(n, completed[n])")
    big = names(999)
    activation = cel_runtime._activation(1, 1, big, dict.fromkeys(big, True))
    _, full = cel_runtime.run(compiled.program, activation, limit=10**9)
    with pytest.raises(cel_runtime.StepLimitExceeded) as info:
        cel_runtime.run(compiled.program, activation, limit=100)
    assert info.value.limit == 100
    assert full > 20_000  # every element visited when allowed, none past 100 steps when not


def test_a_stopped_condition_fails_its_node_like_any_evaluation_error() -> None:
    # The graph is not validated here (the coordinator validates it first), so the only
    # bound left is the step limit, and the plan fails the node with the guard's reason.
    spec = graph(300, "completed.all(n, completed[n])")
    rows = {f"t{i}": NodeRow("completed", 1) for i in range(300)} | {"gate": NodeRow("pending")}
    checkpoint = Checkpoint()
    plan = evaluate(spec, checkpoint, rows)
    assert [job_id for job_id, _ in plan.fail] == ["w:gate"]
    assert "evaluation steps" in plan.fail[0][1]
    failed = [e for e in checkpoint.history if e["event"] == "condition_failed"]
    assert failed and "evaluation steps" in failed[0]["reason"]


# -- compiling evaluates once ------------------------------------------------------------


def test_compiling_evaluates_the_condition_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[object] = []
    original = cel_runtime._SampleMap.__missing__

    def counting(self: cel_runtime._SampleMap, key: object) -> object:
        reads.append(key)
        return original(self, key)

    monkeypatch.setattr(cel_runtime._SampleMap, "__missing__", counting)
    cel.compile("states.evaluated_once == 'pending'")
    assert reads == ["evaluated_once"]


# -- the size of built values ------------------------------------------------------------


def doubling(seed: str, times: int) -> str:
    """``[seed].map(a, a + a).map(a, a + a)…``: a few steps per doubling, so the step
    budget allows dozens of them, and 1,024 bytes of source would reach exabytes."""
    return f"[{seed}]" + ".map(a, a + a)" * times + ".size() == 1"


@pytest.mark.parametrize(
    ("seed", "unit"),
    [("'0123456789abcdef'", "characters"), ("b'0123456789abcdef'", "bytes"), (TEN, "elements")],
)
def test_a_value_built_by_addition_is_stopped_at_the_size_limit(seed: str, unit: str) -> None:
    compiled = cel.compile(doubling(seed, 14))  # 16 × 2**14 = 262,144: over the limit
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(compiled, 1, 1, {}, {})
    assert f"{cel.MAX_VALUE_LENGTH:,} {unit}" in info.value.message


def test_a_value_at_the_size_limit_is_allowed() -> None:
    assert cel.MAX_VALUE_LENGTH == 16 * 2**12
    assert cel.evaluate(cel.compile(doubling("'0123456789abcdef'", 12)), 1, 1, {}, {})


@pytest.mark.parametrize("use", ["z == [z[0], z[1]]", "size(string(z)) > 0"])
def test_a_value_nested_in_itself_is_stopped_at_the_size_limit(use: str) -> None:
    # Each .map(a, [a, a]) doubles the elements an equality or string() walks while memory
    # stays small (both halves are one shared list): 16 levels are 131,070 elements, and
    # each further level doubled the time, hours within the 1,024 bytes of a condition.
    expression = "[[1]]" + ".map(a, [a, a])" * 16 + f".map(z, {use}).size() == 1"
    compiled = cel.compile(expression)
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(compiled, 1, 1, {}, {})
    assert f"over the limit of {cel.MAX_VALUE_LENGTH:,} elements" in info.value.message


def test_a_shared_value_within_the_size_limit_is_evaluated() -> None:
    expression = "[[1]]" + ".map(a, [a, a])" * 14 + ".map(z, z == [z[0], z[1]]).all(b, b)"
    assert cel.evaluate(cel.compile(expression), 1, 1, {}, {}) is True  # 32,766 elements

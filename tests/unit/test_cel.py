"""CEL conditions: the compile-time guarantees and evaluation against workflow state."""

from __future__ import annotations

import sys

import pytest

from headgate_django.exceptions import ConditionError, ConditionEvaluationError, GraphError
from headgate_django.kernel import cel, cel_runtime


def run(expression: str, **state: object) -> bool:
    values: dict = {"revision": 1, "generation": 1, "states": {}, "completed": {}}
    values.update(state)
    return cel.evaluate(cel.compile(expression), **values)


def refused(expression: object) -> ConditionError:
    with pytest.raises(ConditionError) as info:
        cel.compile(expression)  # type: ignore[arg-type]
    return info.value


def test_documented_example() -> None:
    expression = "completed.prepare && states.prepare == 'completed'"
    assert run(expression, states={"prepare": "completed"}, completed={"prepare": True}) is True
    assert run(expression, states={"prepare": "running"}, completed={"prepare": False}) is False


def test_every_variable_is_available() -> None:
    expression = "revision == 3u && generation > 1u && size(states) == 2 && !completed.b"
    states = {"a": "completed", "b": "pending"}
    completed = {"a": True, "b": False}
    assert run(expression, revision=3, generation=2, states=states, completed=completed) is True
    assert run(expression, revision=2, generation=2, states=states, completed=completed) is False


def test_macros_over_states() -> None:
    expression = "states.exists(name, states[name] == 'archived')"
    assert run(expression, states={"a": "completed", "b": "archived"}) is True
    assert run(expression, states={"a": "completed"}) is False
    assert run("completed.all(n, completed[n])", completed={"a": True, "b": True}) is True


def test_errors_are_graph_errors() -> None:
    assert issubclass(ConditionEvaluationError, ConditionError)
    assert issubclass(ConditionError, GraphError)


@pytest.mark.parametrize("expression", ["", "   ", "\n\t"])
def test_empty_refused(expression: str) -> None:
    assert "empty" in refused(expression).message


def test_not_a_string_refused() -> None:
    assert "string" in refused(None).message
    refused(b"true")


def test_size_limit_in_utf8_bytes() -> None:
    assert cel.MAX_EXPRESSION_BYTES == 1024
    at_limit = "true" + " " * 1020
    assert cel.compile(at_limit).source == at_limit
    assert "1025" in refused(at_limit + " ").message
    # 'é' is 2 bytes: 'é' * 508 + 8 bytes of quotes/operator = 1024 bytes but 516 characters.
    multibyte = "'" + "é" * 508 + "' != ''"
    assert len(multibyte.encode()) == 1024
    cel.compile(multibyte)
    refused("'" + "é" * 509 + "' != ''")


def test_lone_surrogate_refused() -> None:
    assert "UTF-8" in refused("'\ud800' == ''").message


@pytest.mark.parametrize("expression", ["(", "completed.a &&", "a = b", "if x then y", "1 +"])
def test_syntax_error_refused(expression: str) -> None:
    assert "not valid CEL" in refused(expression).message


@pytest.mark.parametrize(
    "expression",
    [
        "1 + 2",
        "'completed'",
        "[true]",
        "{'a': true}",
        "-revision",
        "revision",
        "states.a",
        "completed.a ? 1 : 2",
        "completed.a ? true : 'no'",
        "null",
        "(((1)))",
        "size(states)",
    ],
)
def test_expression_that_cannot_be_boolean_refused(expression: str) -> None:
    assert "boolean" in refused(expression).message


@pytest.mark.parametrize("expression", ["x", "ready", "foo(1)", "states.launch_missiles()"])
def test_unknown_variable_or_function_refused(expression: str) -> None:
    assert "unknown variable or function" in refused(expression).message


def test_nesting_limit() -> None:
    shallow = "(" * 5 + "true" + ")" * 5
    deep = "(" * 12 + "true" + ")" * 12
    cel.compile(shallow)
    assert "nested too deeply" in refused(deep).message
    assert "nested too deeply" in refused("!" * 200 + "true").message


def test_compile_leaves_the_recursion_limit_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel_runtime, "_environment", None)
    cel._compile_cached.cache_clear()
    before = sys.getrecursionlimit()
    cel.compile("completed.a || true")
    assert sys.getrecursionlimit() == before


def test_compile_is_cached_by_source() -> None:
    assert cel.compile("completed.x") is cel.compile("completed.x")


def test_state_dependent_failure_is_reported_at_evaluation() -> None:
    compiled = cel.compile("revision / (generation - 1u) > 0u")
    assert cel.evaluate(compiled, 4, 2, {}, {}) is True
    with pytest.raises(ConditionEvaluationError, match="divide by zero"):
        cel.evaluate(compiled, 4, 1, {}, {})


def test_missing_node_fails_evaluation() -> None:
    compiled = cel.compile("completed.ghost")
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(compiled, 1, 1, {}, {"a": True})
    assert "completed.ghost" in info.value.message


def test_a_misspelt_node_name_fails_with_the_names_of_the_nodes() -> None:
    compiled = cel.compile("completed.prepre")
    states = {"prepare": "completed", "gate": "pending"}
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(compiled, 1, 1, states, {"prepare": True, "gate": False})
    assert info.value.message == (
        "condition 'completed.prepre' failed: no such member in mapping: 'prepre' "
        "(the workflow's nodes: gate, prepare)"
    )


def test_the_node_names_of_a_failed_lookup_are_capped() -> None:
    states = {f"n{i:02}": "pending" for i in range(30)}
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(cel.compile("states.ghost == 'x'"), 1, 1, states, {})
    assert info.value.message.endswith(
        "(the workflow's nodes: n00, n01, n02, n03, n04, n05, n06, n07, n08, n09, …)"
    )


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("completed.a &&", "it ends too early"),
        ("states['a' == 'x'", "it ends too early: ] expected"),
        (
            "completed.a and completed.b",
            "unexpected 'and completed.b' at column 13; CEL writes and as &&",
        ),
        ("completed.a = true", "unexpected '= true' at column 13; CEL writes = as =="),
        (
            "completed.a ||\n completed.b or x",
            "unexpected 'or x' at line 2, column 14; CEL writes or as ||",
        ),
    ],
)
def test_a_syntax_error_says_where_in_one_line(expression: str, reason: str) -> None:
    """celpy's text repeats the expression with a caret under it: misplaced once prefixed,
    and spread over lines in a log or a stored reason."""
    assert refused(expression).message == f"condition {expression!r} is not valid CEL: {reason}"


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("states.a == completed", "== cannot be applied to string and map"),
        ("states.a < 3", "< cannot be applied to string and int"),
        ("-states.a == 'x'", "- cannot be applied to string"),
    ],
)
def test_an_operator_on_the_wrong_types_is_named_as_written(expression, reason) -> None:
    """celpy's own words name a grammar rule and Python classes, not the expression's."""
    with pytest.raises(ConditionEvaluationError) as info:
        cel.evaluate(cel.compile(expression), 1, 1, {"a": "pending"}, {"a": False})
    assert info.value.message == f"condition {expression!r} failed: {reason}"


def test_non_boolean_result_fails_evaluation() -> None:
    # Boolean whenever every node is pending or every node is completed, so it compiles.
    compiled = cel.compile("states.a == 'running' ? 'busy' : true")
    assert cel.evaluate(compiled, 1, 1, {"a": "pending"}, {}) is True
    with pytest.raises(ConditionEvaluationError, match="returned string"):
        cel.evaluate(compiled, 1, 1, {"a": "running"}, {})


def test_matches_runs_on_re2() -> None:
    # RE2 cannot backtrack, so a forged pattern cannot hang the coordinator; it also
    # refuses backreferences, which is how this test tells it apart from Python's re.
    text = "a" * 5000 + "!"
    assert run("states.a.matches('^(a+)+$')", states={"a": text}) is False
    with pytest.raises(ConditionEvaluationError, match="match error"):
        run("states.a.matches('(a)\\\\1')", states={"a": "aa"})


@pytest.mark.parametrize(
    ("arguments", "error_type"),
    [
        ((-1, 1, {}, {}), ValueError),
        ((1, True, {}, {}), ValueError),
        ((1, 1, {"a": 1}, {}), TypeError),
        ((1, 1, {}, {"a": "yes"}), TypeError),
    ],
)
def test_malformed_state_is_a_caller_error(arguments: tuple, error_type: type) -> None:
    with pytest.raises(error_type):
        cel.evaluate(cel.compile("true"), *arguments)

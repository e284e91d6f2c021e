"""The CEL engine behind :mod:`headgate_django.kernel.cel`: everything that touches celpy.

``cel`` imports this module on the first compile or evaluation rather than at its own
import: celpy (with lark and pendulum) takes a tenth of a second or more to import, and
``cel`` is imported by the workflow builder, the graph validator and the coordinator, so by
every process that sets up Django, including each worker that never meets a condition.
The checks and the error messages are ``cel``'s contract; they live here because they
need celpy's parse tree and types.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, CELSyntaxError, CELUnsupportedError
from lark.exceptions import LarkError

from headgate_django.exceptions import ConditionError, ConditionEvaluationError
from headgate_django.kernel.cel import MAX_EXPRESSION_DEPTH, VARIABLES

_environment: celpy.Environment | None = None
# The parser adapter keeps the text being parsed on itself (for error messages), so
# parses are serialised; evaluation builds a fresh evaluator per call and needs no lock.
_parse_lock = threading.Lock()


def program(expression: str) -> celpy.Runner:
    """Parse and check *expression* (non-empty, within the size limit) into a runnable program.

    Raises :class:`ConditionError` when it is not CEL, is nested too deeply, or can never
    return a boolean (see the checks in :mod:`headgate_django.kernel.cel`).
    """
    with _parse_lock:
        environment = _get_environment()
        try:
            tree = environment.compile(expression)
        except (CELParseError, LarkError) as exc:
            raise ConditionError(f"condition {expression!r} is not valid CEL: {exc}") from exc
    depth = _tree_depth(tree)
    if depth > MAX_EXPRESSION_DEPTH:
        raise ConditionError(
            f"condition {expression!r} is nested too deeply "
            f"({depth} levels, at most {MAX_EXPRESSION_DEPTH})"
        )
    if _never_boolean(tree):
        raise ConditionError(f"condition {expression!r} can never return a boolean")
    runner = environment.program(tree)
    for state, done in (("pending", False), ("completed", True)):
        _check_sample(runner, expression, state, done)
    return runner


def evaluate(
    runner: celpy.Runner,
    source: str,
    revision: int,
    generation: int,
    states: Mapping[str, str],
    completed: Mapping[str, bool],
) -> bool:
    """Run a program from :func:`program` on one workflow state (see ``cel.evaluate``)."""
    activation = _activation(revision, generation, states, completed)
    try:
        value = runner.evaluate(activation)
    except CELEvalError as exc:
        raise ConditionEvaluationError(f"condition {source!r} failed: {_describe(exc)}") from exc
    except RecursionError as exc:
        raise ConditionEvaluationError(
            f"condition {source!r} is nested too deeply to evaluate here"
        ) from exc
    except Exception as exc:
        # celpy signals some failures with plain Python exceptions; the caller must be able
        # to rely on one error type for "this condition could not be decided".
        raise ConditionEvaluationError(
            f"condition {source!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(value, celtypes.BoolType | bool):
        raise ConditionEvaluationError(
            f"condition {source!r} returned {_type_name(value)}, not a boolean"
        )
    return bool(value)


def _get_environment() -> celpy.Environment:
    """The shared environment, built on first use (it loads the grammar); call under the lock."""
    global _environment
    if _environment is None:
        # celpy raises the process-wide recursion limit as a side effect; the depth cap
        # above makes that unnecessary, and a kernel module must not change global state.
        limit = sys.getrecursionlimit()
        try:
            _environment = celpy.Environment()
        finally:
            sys.setrecursionlimit(limit)
    return _environment


def _tree_depth(tree: lark.Tree) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, lark.Tree):
            stack.extend((child, depth + 1) for child in node.children)
    return deepest


_BOOLEAN_BINARY = frozenset({"conditionalor", "conditionaland", "relation"})
_NUMERIC_BINARY = frozenset({"addition", "multiplication"})


def _never_boolean(tree: lark.Tree) -> bool:
    """True when every result branch is certainly not a boolean, from the tree's shape alone.

    Only shapes whose type is fixed by the grammar are judged; identifiers, member access
    and calls are left to the sample evaluations.
    """
    pending: list[Any] = [tree]
    while pending:
        node = pending.pop()
        if not isinstance(node, lark.Tree):
            return False
        children = node.children
        if node.data == "expr" and len(children) == 3:
            pending.extend((children[1], children[2]))  # both branches of ``c ? a : b``
        elif node.data in _BOOLEAN_BINARY and len(children) == 2:
            return False
        elif node.data in _NUMERIC_BINARY and len(children) == 2:
            continue
        elif node.data == "unary" and len(children) == 2:
            if getattr(children[0], "data", None) == "unary_not":
                return False
        elif node.data == "literal":
            if getattr(children[0], "type", None) == "BOOL_LIT":
                return False
        elif node.data in ("list_lit", "map_lit"):
            continue
        elif len(children) == 1:
            pending.append(children[0])  # a wrapper level such as ``unary`` or ``paren_expr``
        else:
            return False
    return True


class _SampleMap(celtypes.MapType):
    """A map that answers every key with one value, so a sample covers any node name."""

    def __init__(self, default: celtypes.Value) -> None:
        super().__init__({})
        self._default = default

    def __missing__(self, key: Any) -> celtypes.Value:
        return self._default


def _check_sample(runner: celpy.Runner, source: str, state: str, done: bool) -> None:
    activation: dict[str, celtypes.Value] = {
        "revision": celtypes.UintType(1),
        "generation": celtypes.UintType(1),
        "states": _SampleMap(celtypes.StringType(state)),
        "completed": _SampleMap(celtypes.BoolType(done)),
    }
    try:
        value = runner.evaluate(activation)
    except CELEvalError as exc:
        # Only a reference to a name that no activation will ever provide is certain to
        # fail again; other failures may depend on the state and are judged at run time.
        if str(exc.args[0] if exc.args else "").startswith("undeclared reference"):
            raise ConditionError(
                f"condition {source!r} uses an unknown variable or function; "
                f"the variables are {', '.join(VARIABLES)}"
            ) from exc
        return
    except (CELSyntaxError, CELUnsupportedError) as exc:
        raise ConditionError(f"condition {source!r} cannot be evaluated: {exc}") from exc
    except RecursionError as exc:
        raise ConditionError(f"condition {source!r} is nested too deeply") from exc
    except Exception:
        return  # a data-dependent failure inside celpy; evaluate() reports it precisely
    if not isinstance(value, celtypes.BoolType | bool):
        raise ConditionError(
            f"condition {source!r} returned {_type_name(value)} when every node is {state}, "
            "not a boolean"
        )


def _activation(
    revision: int,
    generation: int,
    states: Mapping[str, str],
    completed: Mapping[str, bool],
) -> dict[str, celtypes.Value]:
    for label, number in (("revision", revision), ("generation", generation)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{label} must be a non-negative integer, got {number!r}")
    state_map = celtypes.MapType()
    for name, state in states.items():
        if not isinstance(name, str) or not isinstance(state, str):
            raise TypeError(f"states must map str to str, got {name!r}: {state!r}")
        state_map[celtypes.StringType(name)] = celtypes.StringType(state)
    completed_map = celtypes.MapType()
    for name, done in completed.items():
        if not isinstance(name, str) or not isinstance(done, bool):
            raise TypeError(f"completed must map str to bool, got {name!r}: {done!r}")
        completed_map[celtypes.StringType(name)] = celtypes.BoolType(done)
    return {
        "revision": celtypes.UintType(revision),
        "generation": celtypes.UintType(generation),
        "states": state_map,
        "completed": completed_map,
    }


def _describe(exc: CELEvalError) -> str:
    message = exc.args[0] if exc.args else exc
    # An undeclared-reference message embeds the whole activation; keep the useful head.
    return str(message).split(" (in activation", 1)[0]


def _type_name(value: object) -> str:
    return type(value).__name__.removesuffix("Type").lower() or type(value).__name__

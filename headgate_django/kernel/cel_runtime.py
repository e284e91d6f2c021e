"""The CEL engine behind :mod:`headgate_django.kernel.cel`: everything that touches celpy.

``cel`` imports this module on the first compile or evaluation rather than at its own
import: celpy (with lark and pendulum) takes a tenth of a second or more to import, and
``cel`` is imported by the workflow builder, the graph validator and the coordinator, so by
every process that sets up Django, including each worker that never meets a condition.
The checks and the error messages are ``cel``'s contract; they live here because they
need celpy's parse tree and types (:mod:`.cel_messages` rewords celpy's errors).
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
from celpy.evaluation import (
    Activation,
    CELEvalError,
    CELSyntaxError,
    CELUnsupportedError,
    Context,
    Evaluator,
)
from lark.exceptions import LarkError

from headgate_django.exceptions import ConditionError, ConditionEvaluationError
from headgate_django.kernel import cel_cost, cel_messages
from headgate_django.kernel.cel import (
    MAX_EVALUATION_STEPS,
    MAX_EXPRESSION_DEPTH,
    MAX_VALUE_LENGTH,
    VARIABLES,
)

_environment: celpy.Environment | None = None
# The parser adapter keeps the text being parsed on itself (for error messages), so
# parses are serialised; evaluation builds a fresh evaluator per call and needs no lock.
_parse_lock = threading.Lock()


def program(expression: str) -> celpy.Runner:
    """Parse and check *expression* (non-empty, within the size limit) into a runnable program.

    Raises :class:`ConditionError` when it is not CEL, is nested too deeply, costs more
    than the budget with empty ``states``, or can never return a boolean (see the checks
    in :mod:`headgate_django.kernel.cel`).
    """
    with _parse_lock:
        environment = _get_environment()
        try:
            tree = environment.compile(expression)
        except (CELParseError, LarkError) as exc:
            where = cel_messages.syntax_error(expression, exc)
            raise ConditionError(f"condition {expression!r} is not valid CEL: {where}") from exc
    depth = _tree_depth(tree)
    if depth > MAX_EXPRESSION_DEPTH:
        raise ConditionError(
            f"condition {expression!r} is nested too deeply "
            f"({depth} levels, at most {MAX_EXPRESSION_DEPTH})"
        )
    check_cost(tree, expression, 0)
    if _never_boolean(tree):
        raise ConditionError(f"condition {expression!r} can never return a boolean")
    runner = environment.program(tree)
    _check_sample(runner, expression)
    return runner


def check_cost(tree: lark.Tree, source: str, nodes: int) -> int:
    """The estimated cost of *tree* in a workflow of *nodes* nodes; refused over budget."""
    try:
        cost = cel_cost.estimate(tree, nodes)
    except ConditionError as exc:
        raise ConditionError(f"condition {source!r}: {exc.message}") from exc
    if cost > MAX_EVALUATION_STEPS:
        where = f" in a workflow of {nodes} nodes" if nodes else ""
        raise ConditionError(
            f"condition {source!r} is too expensive: its estimated cost{where} is "
            f"{cost:,} evaluation steps, over the budget of {MAX_EVALUATION_STEPS:,}"
        )
    return cost


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
        value, _ = run(runner, activation)
    except StepLimitExceeded as exc:
        raise ConditionEvaluationError(
            f"condition {source!r} was stopped after {exc.limit:,} evaluation steps, "
            "its limit: it iterates over more elements than its cost estimate allowed for"
        ) from exc
    except ValueLimitExceeded as exc:
        raise ConditionEvaluationError(
            f"condition {source!r} built a value of {exc.length:,} {exc.unit}, over the "
            f"limit of {MAX_VALUE_LENGTH:,} {exc.unit}"
        ) from exc
    except CELEvalError as exc:
        reason = cel_messages.describe(exc) + cel_messages.node_names(exc, states)
        raise ConditionEvaluationError(f"condition {source!r} failed: {reason}") from exc
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


class StepLimitExceeded(Exception):
    """Evaluation visited more tree nodes than its limit allows (internal to this module:
    :func:`evaluate` turns it into a :class:`ConditionEvaluationError`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} evaluation steps")
        self.limit = limit


class ValueLimitExceeded(Exception):
    """A ``+`` built a string, bytes or list longer than :data:`MAX_VALUE_LENGTH` (internal
    to this module, like :class:`StepLimitExceeded`)."""

    def __init__(self, length: int, unit: str) -> None:
        super().__init__(f"a value of {length} {unit}")
        self.length = length
        self.unit = unit


_UNITS: tuple[tuple[type, str], ...] = ((str, "characters"), (bytes, "bytes"), (list, "elements"))


class _Meter:
    """The steps one evaluation has taken, shared by the evaluators of its comprehensions,
    and the weights of the lists and maps it has met (see :meth:`weigh`)."""

    __slots__ = ("limit", "steps", "weights")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.steps = 0
        # id → (the value, kept alive so that its id is not reused, and its weight).
        self.weights: dict[int, tuple[object, int]] = {}

    def tick(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.limit:
            raise StepLimitExceeded(self.limit)

    def weigh(self, value: list[Any] | dict[Any, Any]) -> None:
        """Refuse a list or map whose elements, counted through every nested list and map
        as often as they are reached, number more than :data:`MAX_VALUE_LENGTH`.

        A comprehension can nest a value in itself at each step (``[x].map(a, [a, a])``
        doubles it) without copying anything, so memory stays small while an equality,
        an ``in`` or a ``string()``, which walk every element, take exponential time.
        Weights are remembered, so a value shared many times is walked once.
        """
        weights = self.weights
        if id(value) in weights:
            return
        stack: list[tuple[Any, bool]] = [(value, False)]
        while stack:
            item, expanded = stack.pop()
            if id(item) in weights:
                continue
            children = list(item.values() if isinstance(item, dict) else item)
            nested = [c for c in children if isinstance(c, list | dict)]
            if not expanded:
                stack.append((item, True))
                stack.extend((c, False) for c in nested if id(c) not in weights)
                continue
            weight = len(children) + sum(weights[id(c)][1] for c in nested)
            if weight > MAX_VALUE_LENGTH:
                raise ValueLimitExceeded(weight, "elements")
            weights[id(item)] = (item, weight)


class _MeteredEvaluator(Evaluator):
    """celpy's interpreter, counting every tree node it dispatches (a *step*, the unit of
    :mod:`.cel_cost`) and stopping at the limit.

    A lark ``Interpreter`` dispatches a node either from ``visit`` or, for each subtree
    child, from ``visit_children``; celpy uses only those two, and each comprehension
    element runs in a fresh evaluator from ``sub_evaluator``, which shares the meter and
    binds the element with ``set_activation``. The check is inside the interpreter, so
    nothing keeps running once the limit is reached.
    """

    def __init__(self, ast: lark.Tree, activation: Activation, meter: _Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return _MeteredEvaluator(ast, self.activation, self.meter)

    def set_activation(self, values: Context) -> Evaluator:
        self.meter.tick(cel_cost.BINDING_STEPS)
        return super().set_activation(values)

    def visit(self, tree: lark.Tree) -> Any:
        self.meter.tick(1)
        return super().visit(tree)

    def visit_children(self, tree: lark.Tree) -> list[Any]:
        subtrees = sum(isinstance(child, lark.Tree) for child in tree.children)
        self.meter.tick(subtrees + cel_cost.operator_steps(tree))
        values = super().visit_children(tree)
        # Every operator and function receives its operands here: weigh the collections
        # among them before it may walk them.
        for value in values:
            if isinstance(value, list | dict):
                self.meter.weigh(value)
        return values

    def addition(self, tree: lark.Tree) -> Any:
        # A step of ``+`` copies both operands: cheap only while they are small, and in a
        # comprehension it can double a value per element (see ``cel``'s docstring). The
        # check follows the copy, so nothing larger than twice the limit is ever built.
        value = super().addition(tree)
        if isinstance(value, str | bytes | list) and len(value) > MAX_VALUE_LENGTH:
            unit = next(unit for kind, unit in _UNITS if isinstance(value, kind))
            raise ValueLimitExceeded(len(value), unit)
        return value

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        # celpy's Activation.resolve_variable, minus the typing.cast of a Union it builds on
        # every call: that cast was most of the time of a lookup, and an identifier is
        # meant to cost one step like any other node.
        activation = self.activation
        try:
            return activation.identifiers.resolve_name(activation.package, name).value
        except KeyError:
            return activation.functions[name]


def run(
    runner: celpy.Runner,
    activation: Mapping[str, celtypes.Value],
    limit: int = MAX_EVALUATION_STEPS,
) -> tuple[Any, int]:
    """Evaluate *runner*'s tree on *activation* within *limit* steps: (value, steps taken).

    Raises :class:`StepLimitExceeded` past the limit, and whatever celpy raises otherwise.
    """
    meter = _Meter(limit)
    evaluator = _MeteredEvaluator(runner.ast, runner.new_activation(), meter)
    return evaluator.evaluate(activation), meter.steps


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


def _check_sample(runner: celpy.Runner, source: str) -> None:
    """Evaluate once, as if every node were pending: what fails here for want of a name,
    or returns a non-boolean, is refused. One sample, not one per state, so that compiling
    never costs more than one evaluation."""
    activation: dict[str, celtypes.Value] = {
        "revision": celtypes.UintType(1),
        "generation": celtypes.UintType(1),
        "states": _SampleMap(celtypes.StringType("pending")),
        "completed": _SampleMap(celtypes.BoolType(False)),
    }
    try:
        value, _ = run(runner, activation)
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
            f"condition {source!r} returned {_type_name(value)} when every node is pending, "
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
    # A 999-node workflow means 2,000 entries; converting each one anew cost more than
    # evaluating a typical condition, so equal strings (node names appear in both maps,
    # states are a dozen words) and the two booleans are converted once.
    strings: dict[str, celtypes.StringType] = {}
    state_map = celtypes.MapType()
    for name, state in states.items():
        if not isinstance(name, str) or not isinstance(state, str):
            raise TypeError(f"states must map str to str, got {name!r}: {state!r}")
        state_map[_shared(strings, name)] = _shared(strings, state)
    booleans = {True: celtypes.BoolType(True), False: celtypes.BoolType(False)}
    completed_map = celtypes.MapType()
    for name, done in completed.items():
        if not isinstance(name, str) or not isinstance(done, bool):
            raise TypeError(f"completed must map str to bool, got {name!r}: {done!r}")
        completed_map[_shared(strings, name)] = booleans[done]
    return {
        "revision": celtypes.UintType(revision),
        "generation": celtypes.UintType(generation),
        "states": state_map,
        "completed": completed_map,
    }


def _shared(strings: dict[str, celtypes.StringType], text: str) -> celtypes.StringType:
    converted = strings.get(text)
    if converted is None:
        converted = strings[text] = celtypes.StringType(text)
    return converted


def _type_name(value: object) -> str:
    return type(value).__name__.removesuffix("Type").lower() or type(value).__name__

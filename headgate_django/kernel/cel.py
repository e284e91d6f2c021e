"""CEL conditions of workflow condition nodes: compile once, evaluate against workflow state.

A condition is a bounded boolean decision over four variables: ``revision`` and
``generation`` (unsigned integers), ``states`` (node name to state string) and
``completed`` (node name to boolean). Expressions come from users and, through a stored
coordinator payload, possibly from a forger, so everything here assumes hostile input:
the source is capped at :data:`MAX_EXPRESSION_BYTES`, the parse tree at
:data:`MAX_EXPRESSION_DEPTH` levels (the interpreter recurses about five Python frames per
level, so this keeps evaluation far from the interpreter's recursion limit), and no
extension function is bound, so an expression can compute but cannot reach the outside
world. Regular expressions in ``matches()`` run on RE2, which cannot backtrack.

The cost is bounded too, because a tick of the coordinator must never be held by one
condition: :mod:`.cel_cost` estimates the worst-case number of evaluation steps from the
parse tree and the workflow's node count (which bounds ``states`` and ``completed``), and
:func:`compile` refuses an expression over :data:`MAX_EVALUATION_STEPS`; evaluation counts
the same steps and stops at that limit, for whatever the estimate could not see. A step
is cheap only while the values it touches are small, and ``+`` is the one operator that
makes a value larger than its operands: bound in a comprehension (``[s].map(a, a + a)``)
it doubles a string, bytes or a list in a handful of steps, so a few hundred bytes of
source would ask for gigabytes. The result of every ``+`` is therefore limited to
:data:`MAX_VALUE_LENGTH` characters, bytes or elements, and the evaluation fails past it.
A comprehension can also nest a value in itself without copying it (``[x].map(a, [a,
a])``): memory stays small, but an equality or a ``string()`` walks every element as often
as it is reached, which doubles per step. So every list or map an operator or function
receives is weighed, its elements counted through every nested list and map, and one
over :data:`MAX_VALUE_LENGTH` fails the evaluation too.

Whether an expression returns a boolean is checked at compile time as well as CEL allows
without a type checker: the shape of the parse tree (a top-level ``+`` or a string literal
can never be a boolean), then two sample evaluations against workflow states in which every
node is pending, then completed. Only what is certain to fail is refused; an expression
that fails on a particular state (``1 / 0``) is refused when it is evaluated.

celpy itself is imported on the first compile or evaluation (:mod:`.cel_runtime`), not with
this module, so processes that never meet a condition do not pay for loading it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headgate_django.exceptions import ConditionError

if TYPE_CHECKING:
    import celpy

MAX_EXPRESSION_BYTES = 1024
MAX_EXPRESSION_DEPTH = 100
#: The most evaluation steps (parse-tree nodes visited) a condition may cost: the static
#: budget at prepare and graft time and the runtime limit of one evaluation. About 10 ms
#: of celpy on a slow shared core; ``benchmarks/cel_cost.py`` measures it.
MAX_EVALUATION_STEPS = 1_000
#: The most the conditions of one workflow may cost together, the sum of their estimates:
#: a coordinator tick can evaluate all of them, so this bounds a tick's CEL time (about a
#: second on a slow shared core) however many condition nodes a graph declares.
MAX_WORKFLOW_EVALUATION_STEPS = 100_000
#: The most characters (string), bytes (bytes) or elements (list) a ``+`` may build, and
#: the most elements a list or map may hold, counted through its nested lists and maps.
MAX_VALUE_LENGTH = 65_536

#: The variables an expression may read; anything else is an undeclared reference.
VARIABLES = ("revision", "generation", "states", "completed")


@dataclass(frozen=True, eq=False)
class CompiledCondition:
    """A checked expression, ready to evaluate as often as needed (immutable, shareable)."""

    source: str
    program: celpy.Runner

    def __repr__(self) -> str:
        return f"CompiledCondition({self.source!r})"


def compile(expression: str, nodes: int = 0) -> CompiledCondition:
    """Compile *expression*, raising :class:`ConditionError` if it can never be a valid
    condition or, in a workflow of *nodes* nodes, costs more than the budget.

    Results are cached by source text (and the cost check by node count) because the
    coordinator revalidates its graph, and so recompiles every condition, on each tick.
    """
    if not isinstance(expression, str):
        raise ConditionError(f"a condition must be a string, got {type(expression).__name__}")
    compiled = _compile_cached(expression)
    if nodes:
        _cost_cached(compiled, nodes)
    return compiled


def cost(expression: str, nodes: int) -> int:
    """The estimated worst-case steps of *expression* in a workflow of *nodes* nodes, after
    the checks of :func:`compile` (which raise :class:`ConditionError`)."""
    return _cost_cached(compile(expression), nodes)


def evaluate(
    compiled: CompiledCondition,
    revision: int,
    generation: int,
    states: Mapping[str, str],
    completed: Mapping[str, bool],
) -> bool:
    """Evaluate against one workflow state.

    Raises :class:`ConditionEvaluationError` when the expression fails on this state (a
    missing key, a division by zero, a type mismatch) or yields something other than a
    boolean; the coordinator decides what that means for the node. Malformed arguments
    are a caller bug and raise ``ValueError``/``TypeError`` instead.
    """
    from headgate_django.kernel import cel_runtime

    return cel_runtime.evaluate(
        compiled.program, compiled.source, revision, generation, states, completed
    )


@functools.lru_cache(maxsize=1024)
def _compile_cached(expression: str) -> CompiledCondition:
    try:
        size = len(expression.encode())
    except UnicodeEncodeError as exc:
        raise ConditionError("a condition must be valid UTF-8 text") from exc
    if not expression.strip():
        raise ConditionError("a condition must not be empty")
    if size > MAX_EXPRESSION_BYTES:
        raise ConditionError(
            f"a condition is limited to {MAX_EXPRESSION_BYTES} bytes of UTF-8, got {size}"
        )
    from headgate_django.kernel import cel_runtime

    return CompiledCondition(expression, cel_runtime.program(expression))


@functools.lru_cache(maxsize=1024)
def _cost_cached(compiled: CompiledCondition, nodes: int) -> int:
    from headgate_django.kernel import cel_runtime

    return cel_runtime.check_cost(compiled.program.ast, compiled.source, nodes)

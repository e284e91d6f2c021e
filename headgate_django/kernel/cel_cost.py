"""A static, worst-case cost estimate of a CEL condition, in evaluation steps.

celpy interprets the parse tree in Python, one method call per tree node, so the time an
evaluation takes is close to proportional to the number of tree nodes it visits: a
*step*. The runtime guard in :mod:`.cel_runtime` counts exactly those visits; this module
bounds them before anything runs, so that an expression a condition cannot afford is
refused when the workflow is prepared or grafted, not when the coordinator meets it.

The rules, conservative and short enough to check by hand:

- every tree node costs one step, plus the cost of its children (both sides of ``&&``
  and ``||``, which celpy does not short-circuit; the costlier branch of ``c ? a : b``);
  an arithmetic, comparison or unary operator or a method call costs
  :data:`OPERATOR_STEPS` more, because celpy builds a ``typing`` subscript each time it
  applies one, which takes about as long as visiting ten nodes;
- a comprehension ``c.all(x, body)`` (also ``exists``, ``exists_one``, ``map``,
  ``filter``) costs ``c`` plus *size(c)* times ``body`` and :data:`BINDING_STEPS`, so
  nesting multiplies;
- *size* is an upper bound on the number of elements, tracked per nesting level: a list or
  map literal has as many as it lists, ``states`` and ``completed`` one per workflow node,
  ``a + b`` the sum, ``map`` and ``filter`` as many as their input, an element or an
  index of a collection the bound of the next level down; a function's result is bounded
  by its largest argument.

celpy's ``reduce()`` extension is refused outright: its accumulator is carried from one
element to the next, so ``r + r`` doubles a value per element and no size bound holds.
String and arithmetic operations run at native speed and count as one step each.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import zip_longest

import lark

from headgate_django.exceptions import ConditionError

#: Per nesting level, an upper bound on the number of elements (``()`` for a scalar).
Size = tuple[int, ...]

#: Binding a variable (once per evaluation, once per comprehension element) clones celpy's
#: activation, which takes about as long as visiting three nodes.
BINDING_STEPS = 3
#: The extra steps of applying ``+ - * / % == != < <= > >= in ! -`` or calling a method
#: such as ``startsWith`` (see the module docstring).
OPERATOR_STEPS = 10
_OPERATORS = frozenset({"addition", "multiplication", "relation", "unary"})
ITERATING = frozenset({"all", "exists", "exists_one", "map", "filter"})
#: ``states`` and ``completed`` have one entry per node of the workflow.
INPUTS = frozenset({"states", "completed"})
_SCALAR_BINARY = frozenset({"conditionalor", "conditionaland", *_OPERATORS})


def estimate(tree: lark.Tree, nodes: int) -> int:
    """The worst-case number of steps of *tree* in a workflow of *nodes* nodes.

    Raises :class:`ConditionError` for ``reduce()``, which no bound covers.
    """
    return BINDING_STEPS + _walk(tree, nodes, {})[0]


def operator_steps(node: lark.Tree) -> int:
    """The extra steps of *node* beyond its visit: an operator applied, or nothing.

    The runtime meter calls this too, so that both count the same thing."""
    if node.data in _OPERATORS and len(node.children) == 2:
        return OPERATOR_STEPS
    if node.data == "member_dot_arg":  # a method call; comprehensions are costed apart
        return OPERATOR_STEPS
    return 0


def _walk(node: object, nodes: int, scope: Mapping[str, Size]) -> tuple[int, Size]:
    if not isinstance(node, lark.Tree):
        return 0, ()
    children = node.children
    if node.data == "member_dot_arg":
        method = children[1]
        if isinstance(method, lark.Token) and method.value == "reduce":
            raise ConditionError("reduce() is not available in conditions")
        if isinstance(method, lark.Token) and method.value in ITERATING and len(children) == 3:
            return _comprehension(method.value, children, nodes, scope)
    if node.data == "ident":
        name = str(children[0])
        size = scope.get(name, (nodes,) if name in INPUTS else ())
        return 1, size
    walked = [_walk(child, nodes, scope) for child in children]
    if node.data == "expr" and len(walked) == 3:
        cost = 1 + walked[0][0] + max(walked[1][0], walked[2][0])
        return cost, _merge(walked[1][1], walked[2][1])
    cost = 1 + operator_steps(node) + sum(cost for cost, _ in walked)
    return cost, _size(node, [size for _, size in walked])


def _comprehension(
    method: str, children: list, nodes: int, scope: Mapping[str, Size]
) -> tuple[int, Size]:
    """``c.method(x, body)``: *body* runs once per element of ``c`` with ``x`` bound to it."""
    cost, size = _walk(children[0], nodes, scope)
    variable, *bodies = children[2].children
    count, element = (size[0], size[1:]) if size else (0, ())
    inner = dict(scope)
    for ident in variable.find_data("ident"):
        inner[str(ident.children[0])] = element
    walked = [_walk(body, nodes, inner) for body in bodies]
    cost += 1 + count * (BINDING_STEPS + sum(body_cost for body_cost, _ in walked))
    if method == "filter":
        return cost, size
    if method == "map":
        return cost, (count, *_merge(*(body_size for _, body_size in walked)))
    return cost, ()


def _size(node: lark.Tree, sizes: list[Size]) -> Size:
    """The element bound of *node*'s value, from its children's (see the module docstring)."""
    data, children = node.data, node.children
    if data == "list_lit":
        elements = children[0].children if children else []
        return (len(elements), *_merge(*sizes))
    if data == "map_lit":
        entries = children[0].children if children else []
        return (len(entries) // 2, *_merge(*sizes))
    if data in ("member_index", "member_dot"):
        return sizes[0][1:]
    if data == "addition" and len(children) == 2:
        if getattr(children[0], "data", None) != "addition_add":
            return ()
        left, right = sizes
        if not left or not right:
            return _merge(left, right)
        return (left[0] + right[0], *_merge(left[1:], right[1:]))
    if data in _SCALAR_BINARY and len(children) == 2:
        return ()
    return _merge(*sizes)


def _merge(*sizes: Size) -> Size:
    """The level-by-level maximum: a bound for a value that may be any one of *sizes*."""
    return tuple(max(level) for level in zip_longest(*sizes, fillvalue=0))

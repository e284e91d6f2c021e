"""The workflow graph: its shape, its limits, and the questions the coordinator asks of it.

A graph is validated when it is prepared and again on every coordinator tick, because the
coordinator reads it back from a stored payload that anyone with database access could
have rewritten. :meth:`GraphSpec.from_json` is therefore strict about shape and types and
validates before it returns, and :func:`validate` bounds every input before doing work
proportional to it. Everything is iterative: a 999-node chain is as cheap as a fan-out.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any

from headgate_django.exceptions import (
    ConditionError,
    CycleError,
    DefinitionError,
    DuplicateNodeError,
    GraphError,
    GraphLimitError,
    UnknownDependencyError,
)
from headgate_django.kernel import cel
from headgate_django.kernel.names import (
    MAX_ID_BYTES,
    has_control_characters,
    validate_job_id,
    validate_kind,
)
from headgate_django.kernel.states import State

MAX_NODES = 999
MAX_EDGES = 10_000
MAX_NAME_BYTES = 128
#: Millisecond values are stored in signed 64-bit columns.
MAX_MS = 2**63 - 1
#: 9999-12-31T23:59:59.999Z: the last instant a job's ``scheduled_at`` (a DATETIME on
#: every backend, and a Python ``datetime``) can hold, so the latest an absolute timer can
#: wake, and where a relative timer whose deadline lies beyond it is scheduled.
LAST_INSTANT_MS = 253_402_300_799_999


class NodeKind(StrEnum):
    TASK = "task"
    SIGNAL = "signal"
    TIMER = "timer"
    CONDITION = "condition"
    CHILD_WORKFLOW = "child_workflow"


#: The optional fields each kind may set; every other optional field must be None.
_KIND_FIELDS: dict[NodeKind, frozenset[str]] = {
    NodeKind.TASK: frozenset(),
    NodeKind.SIGNAL: frozenset({"signal"}),
    NodeKind.TIMER: frozenset({"wake_at_ms", "delay_ms"}),
    NodeKind.CONDITION: frozenset({"condition"}),
    NodeKind.CHILD_WORKFLOW: frozenset({"child_workflow_id"}),
}
_OPTIONAL_STR = ("signal", "condition", "child_workflow_id")
_OPTIONAL_INT = ("wake_at_ms", "delay_ms")
_REQUIRED_KEYS = frozenset({"name", "job_id", "kind", "deps", "job_kind"})
_NODE_KEYS = _REQUIRED_KEYS | frozenset(_OPTIONAL_STR) | frozenset(_OPTIONAL_INT)


@dataclass(frozen=True)
class NodeSpec:
    """One declared node. Construction checks types only; :func:`validate` checks meaning."""

    name: str
    job_id: str
    kind: NodeKind
    deps: tuple[str, ...]
    job_kind: str
    signal: str | None = None
    wake_at_ms: int | None = None
    delay_ms: int | None = None
    condition: str | None = None
    child_workflow_id: str | None = None

    def __post_init__(self) -> None:
        # Types are checked here so that no later code, however it got the node, can trip
        # over a list where a tuple belongs or a bool where an int belongs.
        name = self.name if isinstance(self.name, str) else None
        if name is None:
            raise GraphError(f"a node name must be a string, got {self.name!r}")
        for attr in ("job_id", "job_kind"):
            if not isinstance(getattr(self, attr), str):
                raise GraphError(f"node {name!r}: {attr} must be a string", node=name)
        if not isinstance(self.kind, NodeKind):
            try:
                kind = NodeKind(self.kind)
            except (ValueError, TypeError):
                kinds = ", ".join(NodeKind)
                raise GraphError(
                    f"node {name!r}: kind must be one of {kinds}, got {self.kind!r}", node=name
                ) from None
            object.__setattr__(self, "kind", kind)
        if not isinstance(self.deps, tuple) or not all(isinstance(d, str) for d in self.deps):
            raise GraphError(f"node {name!r}: deps must be a tuple of strings", node=name)
        for attr in _OPTIONAL_STR:
            if not isinstance(getattr(self, attr), str | None):
                raise GraphError(f"node {name!r}: {attr} must be a string or null", node=name)
        for attr in _OPTIONAL_INT:
            value = getattr(self, attr)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise GraphError(f"node {name!r}: {attr} must be an integer or null", node=name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "job_id": self.job_id,
            "kind": self.kind.value,
            "deps": list(self.deps),
            "job_kind": self.job_kind,
            "signal": self.signal,
            "wake_at_ms": self.wake_at_ms,
            "delay_ms": self.delay_ms,
            "condition": self.condition,
            "child_workflow_id": self.child_workflow_id,
        }

    @classmethod
    def from_json(cls, data: object) -> NodeSpec:
        """Rebuild a node from :meth:`to_json` output; optional keys may be absent or null."""
        if not isinstance(data, Mapping):
            raise GraphError(f"a node must be a JSON object, got {type(data).__name__}")
        name = data.get("name")
        label = name if isinstance(name, str) else None
        missing = _REQUIRED_KEYS - data.keys()
        if missing:
            keys = ", ".join(sorted(missing))
            raise GraphError(f"node {label!r} is missing {keys}", node=label)
        unknown = data.keys() - _NODE_KEYS
        if unknown:
            keys = ", ".join(sorted(map(str, unknown)))
            raise GraphError(f"node {label!r} has unknown keys {keys}", node=label)
        deps = data["deps"]
        if not isinstance(deps, list):
            raise GraphError(f"node {label!r}: deps must be a list", node=label)
        if len(deps) > MAX_EDGES:
            raise GraphLimitError(
                f"node {label!r} has {len(deps)} dependencies, more than the {MAX_EDGES} "
                "edges a graph may have",
                node=label,
            )
        kind = data["kind"]
        if not isinstance(kind, str):
            raise GraphError(f"node {label!r}: kind must be a string", node=label)
        optional = {key: data.get(key) for key in (*_OPTIONAL_STR, *_OPTIONAL_INT)}
        # Field types are checked (and ``kind`` converted) by __post_init__.
        return cls(
            name=name,  # type: ignore[arg-type]
            job_id=data["job_id"],
            kind=kind,  # type: ignore[arg-type]
            deps=tuple(deps),
            job_kind=data["job_kind"],
            **optional,
        )


@dataclass(frozen=True)
class GraphSpec:
    """A workflow's nodes in declaration order, which is also the order of every answer."""

    workflow_id: str
    nodes: tuple[NodeSpec, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.workflow_id, str):
            raise GraphError(f"a workflow id must be a string, got {self.workflow_id!r}")
        if not isinstance(self.nodes, tuple) or not all(
            isinstance(n, NodeSpec) for n in self.nodes
        ):
            raise GraphError("nodes must be a tuple of NodeSpec")

    def node(self, name: str) -> NodeSpec:
        """The node called *name*; :class:`GraphError` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise GraphError(
                f"workflow {self.workflow_id!r} has no node {name!r}", node=name
            ) from None

    @cached_property
    def _order(self) -> tuple[tuple[str, ...], frozenset[str]]:
        """Kahn's result, computed once per graph: every coordinator pass asks for it."""
        order, blocked = _kahn(self)
        return tuple(order), frozenset(blocked)

    @cached_property
    def _by_name(self) -> dict[str, NodeSpec]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def _dependents(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for node in self.nodes:
            for dep in node.deps:
                if dep in found:
                    found[dep].append(node.name)
        return {name: tuple(names) for name, names in found.items()}

    def to_json(self) -> dict[str, Any]:
        return {"workflow_id": self.workflow_id, "nodes": [n.to_json() for n in self.nodes]}

    @classmethod
    def from_json(cls, data: object) -> GraphSpec:
        """Rebuild and :func:`validate` a graph; :class:`GraphError` if anything is off.

        Keys other than ``workflow_id`` and ``nodes`` are ignored: the coordinator payload
        this is read from also carries the workflow's settings.
        """
        if not isinstance(data, Mapping):
            raise GraphError(f"a graph must be a JSON object, got {type(data).__name__}")
        if "workflow_id" not in data or "nodes" not in data:
            raise GraphError("a graph needs workflow_id and nodes")
        nodes = data["nodes"]
        if not isinstance(nodes, list):
            raise GraphError("nodes must be a list")
        _check_node_count(len(nodes))
        graph = cls(data["workflow_id"], tuple(NodeSpec.from_json(n) for n in nodes))
        return validate(graph)


# -- validation ----------------------------------------------------------------------


def validate(graph: GraphSpec) -> GraphSpec:
    """Check every documented rule and return *graph* unchanged.

    Cheap, bounded checks run before expensive ones, so an oversized forged graph is
    refused before the work its size would cost.
    """
    _check_workflow_id(graph.workflow_id)
    _check_node_count(len(graph.nodes))
    edges = sum(len(n.deps) for n in graph.nodes)
    if edges > MAX_EDGES:
        raise GraphLimitError(f"the graph has {edges} dependency edges, more than {MAX_EDGES}")
    names: set[str] = set()
    job_ids: dict[str, str] = {}
    for node in graph.nodes:
        _check_name(node.name, "node name", node.name)
        if "\x00" in node.name:
            # A node name is a key of the checkpoint's evidence and part of its history,
            # JSON that PostgreSQL's jsonb cannot hold with U+0000: every tick would fail.
            raise GraphError(
                f"node name {node.name[:40]!r} contains a NUL character (U+0000)", node=node.name
            )
        if node.name in names:
            raise DuplicateNodeError(f"node {node.name!r} is declared twice", node=node.name)
        names.add(node.name)
        _check_job_id(node, job_ids, graph.workflow_id)
        _check_kind_fields(node, graph.workflow_id, len(graph.nodes))
    for node in graph.nodes:
        _check_deps(node, names)
    _, blocked = graph._order
    if blocked:
        _raise_cycle(graph, blocked)
    return graph


def _check_workflow_id(
    workflow_id: str, what: str = "a workflow id", node: str | None = None
) -> None:
    size = _utf8_size(workflow_id)
    if not workflow_id or size is None or size > MAX_ID_BYTES:
        raise GraphError(
            f"{what} must be 1 to {MAX_ID_BYTES} bytes of UTF-8, got {workflow_id[:40]!r}",
            node=node,
        )


def check_conditions_budget(graph: GraphSpec) -> GraphSpec:
    """Refuse a graph whose conditions together cost more than one tick may spend: each
    is within its own budget, but the coordinator may evaluate them all in one tick.

    Checked where a graph is accepted (prepare, graft), not by :func:`validate`, which the
    coordinator also runs on every stored graph: one accepted before this budget existed
    keeps running (each condition stays within its own step limit)."""
    count = len(graph.nodes)
    total = sum(
        cel.cost(n.condition, count)
        for n in graph.nodes
        if n.kind is NodeKind.CONDITION and n.condition is not None
    )
    if total > cel.MAX_WORKFLOW_EVALUATION_STEPS:
        raise GraphLimitError(
            f"the workflow's conditions together have an estimated cost of {total:,} "
            f"evaluation steps in a graph of {count} nodes, over the budget of "
            f"{cel.MAX_WORKFLOW_EVALUATION_STEPS:,} per workflow; use fewer or simpler "
            "conditions"
        )
    return graph


def _check_node_count(count: int) -> None:
    if count == 0:
        raise GraphError("a workflow needs at least one node")
    if count > MAX_NODES:
        raise GraphLimitError(f"the graph has {count} nodes, more than {MAX_NODES}")


def _check_name(value: str, what: str, node: str) -> None:
    size = _utf8_size(value)
    if size is None:
        raise GraphError(f"{what} {value!r} is not valid UTF-8", node=node)
    if not 1 <= size <= MAX_NAME_BYTES:
        error = GraphError if size == 0 else GraphLimitError
        raise error(
            f"{what} {value[:40]!r} must be 1 to {MAX_NAME_BYTES} bytes of UTF-8, got {size}",
            node=node,
        )


def _check_job_id(node: NodeSpec, seen: dict[str, str], workflow_id: str) -> None:
    try:
        validate_job_id(node.job_id)
        validate_kind(node.job_kind)
    except (DefinitionError, UnicodeEncodeError) as exc:
        raise GraphError(f"node {node.name!r}: {exc}", node=node.name) from exc
    if is_reserved_job_id(workflow_id, node.job_id):
        # The coordinator's own row, or where a graft or retry receipt will be written:
        # the node would collide with it (a node called ``coordinator`` or ``graft:2``).
        raise GraphError(
            f"node {node.name!r}: job id {node.job_id!r} is reserved for the workflow's "
            "coordinator and its graft and retry receipts; choose another node name or id",
            node=node.name,
        )
    # Two nodes on one job would let one job's completion satisfy both.
    other = seen.setdefault(node.job_id, node.name)
    if other != node.name:
        raise DuplicateNodeError(
            f"nodes {other!r} and {node.name!r} share job id {node.job_id!r}", node=node.name
        )


def is_reserved_job_id(workflow_id: str, job_id: str) -> bool:
    """Whether ``job_id`` is one the workflow layer writes itself: ``{id}:coordinator``,
    ``{id}:graft:{n}`` or ``{id}:retry:{n}``."""
    prefix = f"{workflow_id}:"
    if not job_id.startswith(prefix):
        return False
    rest = job_id[len(prefix) :]
    return rest == "coordinator" or _RECEIPT_SUFFIX.fullmatch(rest) is not None


_RECEIPT_SUFFIX = re.compile(r"(?:graft|retry):[0-9]+")


def _check_kind_fields(node: NodeSpec, workflow_id: str, node_count: int) -> None:
    name = node.name
    allowed = _KIND_FIELDS[node.kind]
    for attr in (*_OPTIONAL_STR, *_OPTIONAL_INT):
        if attr not in allowed and getattr(node, attr) is not None:
            raise GraphError(f"{node.kind} node {name!r} must not set {attr}", node=name)
    if node.kind is NodeKind.SIGNAL:
        if node.signal is None:
            raise GraphError(f"signal node {name!r} needs a signal name", node=name)
        _check_name(node.signal, f"node {name!r}: signal name", name)
        if has_control_characters(node.signal):
            # An emission can never carry it (PostgreSQL stores no NUL in text).
            raise GraphError(
                f"node {name!r}: signal name {node.signal!r} contains control characters",
                node=name,
            )
    elif node.kind is NodeKind.TIMER:
        _check_timer(node)
    elif node.kind is NodeKind.CONDITION:
        if node.condition is None:
            raise GraphError(f"condition node {name!r} needs a condition", node=name)
        try:
            # The node count bounds ``states`` and ``completed``, so a graft that grows the
            # workflow re-checks the cost of every condition against the larger graph.
            cel.compile(node.condition, nodes=node_count)
        except ConditionError as exc:
            raise ConditionError(f"node {name!r}: {exc.message}", node=name) from exc
    elif node.kind is NodeKind.CHILD_WORKFLOW:
        child = node.child_workflow_id
        if child is None:
            raise GraphError(f"child workflow node {name!r} needs a child workflow id", node=name)
        _check_workflow_id(child, f"node {name!r}: the child workflow id", name)
        try:
            # What Workflow(child) accepts: its coordinator's job id must be a valid job
            # id, or no such workflow can exist and the link could only ever fail.
            validate_job_id(f"{child}:coordinator")
        except DefinitionError as exc:
            raise GraphError(
                f"node {name!r}: {child[:40]!r} cannot be a workflow id: {exc}", node=name
            ) from exc
        if child == workflow_id:
            raise CycleError(f"node {name!r} links the workflow to itself", node=name)


def _check_timer(node: NodeSpec) -> None:
    name = node.name
    if (node.wake_at_ms is None) == (node.delay_ms is None):
        raise GraphError(
            f"timer node {name!r} needs exactly one of wake_at_ms and delay_ms", node=name
        )
    if node.wake_at_ms is not None and not 0 <= node.wake_at_ms <= LAST_INSTANT_MS:
        raise GraphError(
            f"timer node {name!r}: wake_at_ms must be 0 to {LAST_INSTANT_MS} "
            "(9999-12-31T23:59:59.999Z), the instants a job can be scheduled at",
            node=name,
        )
    if node.delay_ms is not None:
        if not 1 <= node.delay_ms <= MAX_MS:
            raise GraphError(f"timer node {name!r}: delay_ms must be at least 1", node=name)
        if not node.deps:
            # The delay runs from the latest dependency's completion; without one there
            # is no store-stamped anchor and the deadline would depend on a worker clock.
            raise GraphError(f"delay timer node {name!r} needs a dependency", node=name)


def _check_deps(node: NodeSpec, names: Set[str]) -> None:
    seen: set[str] = set()
    for dep in node.deps:
        if dep in seen:
            raise GraphError(f"node {node.name!r} lists {dep!r} twice", node=node.name)
        seen.add(dep)
        if dep not in names:
            raise UnknownDependencyError(
                f"node {node.name!r} depends on {dep!r}, which is not declared", node=node.name
            )


def _kahn(graph: GraphSpec) -> tuple[list[str], set[str]]:
    """Kahn's algorithm: (topological order, nodes left unordered because of a cycle).

    Undeclared dependencies are not counted, so on an unvalidated graph every blocked
    node still has a blocked dependency, which :func:`_raise_cycle` relies on.
    """
    dependents = graph._dependents
    indegree = {n.name: sum(d in dependents for d in n.deps) for n in graph.nodes}
    ready = deque(name for name, count in indegree.items() if count == 0)
    order: list[str] = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for child in dependents[name]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    blocked = {name for name, count in indegree.items() if count > 0}
    return order, blocked


def _raise_cycle(graph: GraphSpec, blocked: Set[str]) -> None:
    # Every blocked node has a blocked dependency, so walking blocked dependencies from
    # any of them must revisit a node, and the first revisited node lies on a cycle.
    by_name = graph._by_name
    start = next(n.name for n in graph.nodes if n.name in blocked)
    path: list[str] = []
    position: dict[str, int] = {}
    current = start
    while current not in position:
        position[current] = len(path)
        path.append(current)
        current = next(d for d in by_name[current].deps if d in blocked)
    cycle = [*path[position[current] :], current]
    raise CycleError(
        f"the graph has a cycle: {' -> '.join(reversed(cycle))}", node=current, cycle=cycle
    )


def _utf8_size(value: str) -> int | None:
    """Byte length in UTF-8, or None for text that has none (lone surrogates from JSON)."""
    try:
        return len(value.encode())
    except UnicodeEncodeError:
        return None


# -- questions -----------------------------------------------------------------------


def topological_order(graph: GraphSpec) -> list[str]:
    """Dependencies before dependents; ties broken by declaration order."""
    order, blocked = graph._order
    if blocked:
        _raise_cycle(graph, blocked)
    return list(order)


def dependents_map(graph: GraphSpec) -> dict[str, list[str]]:
    """Every node to its direct dependents, both in declaration order."""
    return {name: list(children) for name, children in graph._dependents.items()}


def dependencies(graph: GraphSpec, name: str) -> list[str]:
    return list(graph.node(name).deps)


def dependents(graph: GraphSpec, name: str) -> list[str]:
    graph.node(name)
    return list(graph._dependents[name])


def failure_closure(graph: GraphSpec, failed: Iterable[str]) -> set[str]:
    """The failed nodes and every transitive descendant: the work a failure dooms."""
    closure: set[str] = set()
    stack = [graph.node(name).name for name in failed]
    dependents_of = graph._dependents
    while stack:
        name = stack.pop()
        if name not in closure:
            closure.add(name)
            stack.extend(dependents_of[name])
    return closure


def ready_nodes(graph: GraphSpec, completed: Set[str], states: Mapping[str, str]) -> list[str]:
    """Pending nodes whose dependencies have all completed, of every kind.

    The caller decides per kind what "ready" triggers: promotion for tasks and child
    links, evaluation for conditions, scheduling for delay timers.
    """
    return [
        node.name
        for node in graph.nodes
        if states.get(node.name) == State.PENDING and all(dep in completed for dep in node.deps)
    ]


def combine(graph: GraphSpec, new_nodes: Iterable[NodeSpec]) -> GraphSpec:
    """The graph with a graft's nodes appended, validated.

    Grafts are additive and task-only: accepted nodes are immutable, and the other kinds
    need durable rules (signal identity, timer anchors, condition state, child links)
    that cannot be attached after the workflow has started.
    """
    added = tuple(new_nodes)
    if not added:
        raise GraphError("a graft needs at least one node")
    existing = graph._by_name
    for node in added:
        if not isinstance(node, NodeSpec):
            raise GraphError(f"a graft node must be a NodeSpec, got {type(node).__name__}")
        if node.name in existing:
            raise DuplicateNodeError(
                f"node {node.name!r} already exists; accepted nodes cannot be replaced",
                node=node.name,
            )
        if node.kind is not NodeKind.TASK:
            raise GraphError(
                f"node {node.name!r}: only task nodes can be grafted, not {node.kind}",
                node=node.name,
            )
    return validate(GraphSpec(graph.workflow_id, graph.nodes + added))

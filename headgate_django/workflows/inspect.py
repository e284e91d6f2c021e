"""Payload-free reads of a workflow: snapshot, nodes, edges, history, list.

A snapshot is read once and answers several questions consistently from memory; the
single-relation helpers are conveniences over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from headgate_django.envelope import decode_call
from headgate_django.exceptions import DefinitionError, NotFoundError
from headgate_django.kernel.graph import GraphSpec, NodeKind, NodeSpec, combine
from headgate_django.kernel.workflow import node_states
from headgate_django.models import Job, WorkflowCheckpoint
from headgate_django.store.reads import job_get
from headgate_django.store.workflows import (
    COORDINATOR_KIND,
    checkpoint_from_row,
    coordinator_job_id,
    from_ms,
    workflow_checkpoint_load,
    workflow_coordinators,
    workflow_nodes_read,
)

MAX_PAGE = 200


@dataclass(frozen=True)
class WorkflowNode:
    name: str
    job_id: str
    kind: str  # task | signal | timer | condition | child_workflow
    job_kind: str
    state: str  # the job's state; "completed" with evidence; "missing" without
    dependencies: tuple[str, ...]
    dependents: tuple[str, ...]
    completed_at_ms: int | None = None
    signal: str | None = None
    wake_at_ms: int | None = None
    delay_ms: int | None = None
    condition: str | None = None
    child_workflow_id: str | None = None

    @property
    def completed_at(self) -> datetime | None:
        return None if self.completed_at_ms is None else from_ms(self.completed_at_ms)


@dataclass(frozen=True)
class WorkflowSnapshot:
    workflow_id: str
    coordinator_job_id: str
    coordinator_state: str
    revision: int
    generation: int
    failed: bool
    failed_subgraph_retry: bool
    retry_policy: dict[str, int] | None
    nodes: tuple[WorkflowNode, ...]

    def node(self, name: str) -> WorkflowNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def dependencies(self, name: str) -> list[str] | None:
        node = self.node(name)
        return None if node is None else list(node.dependencies)

    def dependents(self, name: str) -> list[str] | None:
        node = self.node(name)
        return None if node is None else list(node.dependents)


@dataclass(frozen=True)
class WorkflowSummary:
    workflow_id: str
    coordinator_job_id: str
    coordinator_state: str
    queue: str
    enqueued_at: datetime
    finalized_at: datetime | None


@dataclass(frozen=True)
class WorkflowPage:
    items: list[WorkflowSummary]
    next_cursor: str | None


def _coordinator(workflow_id: str) -> Job:
    job = job_get(coordinator_job_id(workflow_id))
    # Only the library writes the coordinator kind: any other job at that id (an
    # application's "report:coordinator") is not a workflow.
    if job is None or job.kind != COORDINATOR_KIND:
        raise NotFoundError(f"workflow {workflow_id!r} does not exist", workflow_id=workflow_id)
    return job


def _stored(job: Job) -> tuple[GraphSpec, dict[str, Any]]:
    _, kwargs = decode_call(bytes(job.payload))
    return GraphSpec.from_json(kwargs.get("graph")), kwargs.get("options") or {}


def current_graph(job: Job, row: WorkflowCheckpoint | None) -> tuple[GraphSpec, dict[str, Any]]:
    """The declared graph with the accepted grafts appended, and the workflow's options."""
    graph, options = _stored(job)
    if row is not None and row.grafts:
        graph = combine(graph, [NodeSpec.from_json(n) for n in row.grafts])
    return graph, options


def load_graph_of(workflow_id: str) -> GraphSpec:
    graph, _ = _stored(_coordinator(workflow_id))
    return graph


def inspect_workflow(workflow_id: str) -> WorkflowSnapshot:
    """The graph with every node's current state; no payloads."""
    job = _coordinator(workflow_id)
    row = workflow_checkpoint_load(workflow_id)
    graph, options = current_graph(job, row)
    checkpoint = checkpoint_from_row(row)
    rows = workflow_nodes_read({n.name: n.job_id for n in graph.nodes})
    states = node_states(graph, checkpoint, rows)
    dependents: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
    for n in graph.nodes:
        for dep in n.deps:
            dependents[dep].append(n.name)
    nodes = tuple(
        WorkflowNode(
            name=n.name,
            job_id=n.job_id,
            kind=n.kind.value,
            job_kind=n.job_kind,
            state=states[n.name],
            dependencies=n.deps,
            dependents=tuple(dependents[n.name]),
            completed_at_ms=checkpoint.completed.get(n.name),
            signal=n.signal,
            wake_at_ms=n.wake_at_ms,
            delay_ms=n.delay_ms,
            condition=n.condition,
            child_workflow_id=n.child_workflow_id if n.kind is NodeKind.CHILD_WORKFLOW else None,
        )
        for n in graph.nodes
    )
    return WorkflowSnapshot(
        workflow_id=workflow_id,
        coordinator_job_id=job.id,
        coordinator_state=job.state,
        revision=checkpoint.revision,
        generation=checkpoint.generation,
        failed=checkpoint.failed,
        failed_subgraph_retry=bool(options.get("failed_subgraph_retry")),
        retry_policy=options.get("automatic_retry"),
        nodes=nodes,
    )


def workflow_node(workflow_id: str, node: str) -> WorkflowNode:
    found = inspect_workflow(workflow_id).node(node)
    if found is None:
        raise NotFoundError(f"workflow {workflow_id!r} has no node {node!r}")
    return found


def workflow_dependencies(workflow_id: str, node: str) -> list[str]:
    return list(workflow_node(workflow_id, node).dependencies)


def workflow_dependents(workflow_id: str, node: str) -> list[str]:
    return list(workflow_node(workflow_id, node).dependents)


def workflow_events(workflow_id: str) -> list[dict[str, Any]]:
    """The newest 256 history events, oldest first, each with a monotonic ``sequence``."""
    _coordinator(workflow_id)
    row = workflow_checkpoint_load(workflow_id)
    return list(row.history) if row is not None else []


def list_workflows(cursor: str | None = None, limit: int = 50) -> WorkflowPage:
    """Coordinators ordered by workflow id; pass ``next_cursor`` back for the next page."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise DefinitionError(f"limit must be an integer between 1 and {MAX_PAGE}")
    if cursor is not None and not isinstance(cursor, str):
        raise DefinitionError(f"cursor must be a workflow id (a string), got {cursor!r}")
    rows = workflow_coordinators(after=cursor, limit=limit + 1)
    items = [
        WorkflowSummary(
            workflow_id=r["workflow_id"],
            coordinator_job_id=r["id"],
            coordinator_state=r["state"],
            queue=r["queue"],
            enqueued_at=r["enqueued_at"],
            finalized_at=r["finalized_at"],
        )
        for r in rows[:limit]
    ]
    return WorkflowPage(items, items[-1].workflow_id if len(rows) > limit else None)

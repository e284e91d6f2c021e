"""``prepare_bundle``: a parent workflow and its children, created in one atomic batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from headgate_django.envelope import Envelope
from headgate_django.exceptions import BatchError, CycleError, GraphError
from headgate_django.kernel.graph import NodeKind
from headgate_django.workflows.builder import PreparedWorkflow, Workflow, with_waiters

MAX_JOBS = 1000


@dataclass(frozen=True)
class PreparedBundle:
    workflows: list[PreparedWorkflow]
    envelopes: list[Envelope] = field(repr=False)


def prepare_bundle(workflows: Sequence[Workflow]) -> PreparedBundle:
    """Validate every workflow, check that each child link resolves inside the bundle and
    that the links form no cycle across workflows, and build one batch."""
    prepared = [w.prepare() for w in workflows]
    ids = [p.workflow_id for p in prepared]
    if len(set(ids)) != len(ids):
        raise GraphError("a bundle contains the same workflow twice")
    links: dict[str, list[str]] = {p.workflow_id: [] for p in prepared}
    waiters: dict[str, list[str]] = {p.workflow_id: [] for p in prepared}  # child → link jobs
    for p in prepared:
        for node in p.graph.nodes:
            if node.kind is NodeKind.CHILD_WORKFLOW:
                if node.child_workflow_id not in links:
                    raise GraphError(
                        f"workflow {p.workflow_id!r} links child {node.child_workflow_id!r}, "
                        "which is not in the bundle",
                        node=node.name,
                    )
                links[p.workflow_id].append(node.child_workflow_id or "")
                waiters[node.child_workflow_id or ""].append(node.job_id)
    _reject_cycles(links)
    prepared = [with_waiters(p, waiters[p.workflow_id]) for p in prepared]
    envelopes = [env for p in prepared for env in p.envelopes]
    if len(envelopes) > MAX_JOBS:
        raise BatchError(f"a bundle holds at most {MAX_JOBS} jobs, got {len(envelopes)}")
    return PreparedBundle(prepared, envelopes)


def _reject_cycles(links: dict[str, list[str]]) -> None:
    indegree = {w: 0 for w in links}
    for children in links.values():
        for child in children:
            indegree[child] += 1
    ready = [w for w, n in indegree.items() if n == 0]
    seen = 0
    while ready:
        current = ready.pop()
        seen += 1
        for child in links[current]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if seen != len(links):
        stuck = sorted(w for w, n in indegree.items() if n > 0)
        raise CycleError(f"child-workflow links form a cycle through {', '.join(stuck)}")

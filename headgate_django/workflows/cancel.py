"""``cancel_workflow``: stop every live node, then the coordinator, optionally children too."""

from __future__ import annotations

from collections import deque

from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.graph import NodeKind
from headgate_django.store.operator import job_cancel_many
from headgate_django.store.workflows import coordinator_job_id, workflow_live_job_ids
from headgate_django.workflows.inspect import load_graph_of

MAX_WORKFLOWS = 999


def cancel_workflow(workflow_id: str, propagate_children: bool = True) -> dict[str, int]:
    """Cancel live nodes and the coordinator of ``workflow_id`` (and, by default, of every
    linked child workflow, breadth first). Returns ``{"jobs": n, "workflows": m}``."""
    queue = deque([workflow_id])
    seen: set[str] = set()
    jobs = 0
    while queue and len(seen) < MAX_WORKFLOWS:
        current = queue.popleft()
        if current in seen:
            continue
        try:
            graph = load_graph_of(current)
        except NotFoundError:
            if current == workflow_id:
                raise
            continue
        seen.add(current)
        coordinator = coordinator_job_id(current)
        # Accepted grafted nodes and waiting graft/retry receipts are not in the stored
        # base graph; they carry the workflow id like every node does.
        nodes = {n.job_id for n in graph.nodes} | set(workflow_live_job_ids(current))
        # One transaction for the nodes and the coordinator: cancelled nodes wake the
        # coordinator, and one that ran between two commits would see them cancelled in a
        # live workflow and archive it as failed instead of cancelled.
        jobs += job_cancel_many([*sorted(nodes - {coordinator}), coordinator])
        if propagate_children:
            queue.extend(
                n.child_workflow_id
                for n in graph.nodes
                if n.kind is NodeKind.CHILD_WORKFLOW and n.child_workflow_id
            )
    return {"jobs": jobs, "workflows": len(seen)}

"""Child-workflow links that wait on each other, found by a link while it waits.

``prepare_bundle`` refuses a bundle whose links form a cycle, but workflows enqueued one
by one can still link each other: A's link waits for its child B while B's link waits for
its child A, and neither workflow can ever finish. Each poll of a waiting link looks for a
chain of waiting links from its child back to its own workflow. The link that finds one
fails, and so does its workflow (by its failure policy); the other links of the cycle then
see a failed child, so every workflow of the cycle ends instead of waiting for ever.
"""

from __future__ import annotations

from collections import deque

from headgate_django.exceptions import NotFoundError
from headgate_django.store.workflows import workflow_waiting_links
from headgate_django.workflows.inspect import load_graph_of

#: The workflows one look visits at most. A look reads one indexed query per workflow it
#: visits (and the graph of those with waiting links), on every poll of a waiting link; a
#: longer cycle is left waiting, as any cycle was before.
MAX_VISITED = 50


def cycle_through(workflow_id: str, child_id: str) -> list[str] | None:
    """The workflows of a chain of waiting links from ``workflow_id``'s child
    ``child_id`` back to ``workflow_id``, that workflow first and last; None if none."""
    came_from = {child_id: workflow_id}
    frontier = deque([child_id])
    while frontier and len(came_from) <= MAX_VISITED:
        current = frontier.popleft()
        for linked in _waited_children(current):
            if linked == workflow_id:
                chain = [current]
                while chain[-1] != child_id:
                    chain.append(came_from[chain[-1]])
                return [workflow_id, *reversed(chain), workflow_id]
            if linked not in came_from:
                came_from[linked] = current
                frontier.append(linked)
    return None


def _waited_children(workflow_id: str) -> list[str]:
    """The children ``workflow_id``'s waiting links wait for."""
    links = workflow_waiting_links(workflow_id)
    if not links:
        return []
    try:
        graph = load_graph_of(workflow_id)
    except NotFoundError:  # evicted meanwhile
        return []
    children = {n.job_id: n.child_workflow_id for n in graph.nodes}
    return sorted({child for job_id in links if (child := children.get(job_id))})

"""Handlers of the workflow's internal node jobs. Their jobs only become runnable when the
coordinator (or an emission, or the clock) releases them, so running one means "done"."""

from __future__ import annotations

from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.control import Skip, Snooze
from headgate_django.kernel.names import (
    CHILD_KIND,
    CONDITION_KIND,
    GRAFT_KIND,
    RETRY_KIND,
    SIGNAL_KIND,
    TIMER_KIND,
)
from headgate_django.kernel.states import State
from headgate_django.registry import internal_task

_FAILED = {State.ARCHIVED, State.CANCELLED, State.QUARANTINED, State.UNDECODABLE}


@internal_task(kind=TIMER_KIND, queue="headgate-workflow")
def timer_fired(ctx: JobContext, **_: Any) -> None:
    return None


@internal_task(kind=CONDITION_KIND, queue="headgate-workflow")
def condition_met(ctx: JobContext, **_: Any) -> None:
    return None


@internal_task(kind=SIGNAL_KIND, queue="headgate-workflow")
def signal_received(ctx: JobContext, workflow_id: str = "", node: str = "", **_: Any) -> Any:
    """Completes with the payload of the latest matching emission, for inspection."""
    from headgate_django.store.signals import signal_latest
    from headgate_django.workflows.inspect import load_graph_of

    signal = load_graph_of(workflow_id).node(node).signal or ""
    latest = signal_latest(workflow_id, signal)
    return None if latest is None else {"signal": signal, "payload": latest.payload}


@internal_task(kind=GRAFT_KIND, queue="headgate-workflow")
def graft_accepted(ctx: JobContext, **_: Any) -> None:
    """Released by the coordinator once the graft is checkpointed."""
    return None


@internal_task(kind=RETRY_KIND, queue="headgate-workflow")
def retry_accepted(ctx: JobContext, **_: Any) -> None:
    """Released by the coordinator once the new generation is checkpointed."""
    return None


@internal_task(kind=CHILD_KIND, queue="headgate-workflow")
def child_link(ctx: JobContext, workflow_id: str = "", node: str = "", **_: Any) -> dict[str, Any]:
    """Waits for the linked child workflow: completes with it, archives when it fails."""
    from headgate_django.kernel.workflow import Outcome
    from headgate_django.store.reads import job_state
    from headgate_django.store.workflows import coordinator_job_id, workflow_checkpoint_load
    from headgate_django.workflows.inspect import load_graph_of
    from headgate_django.workflows.link_cycles import cycle_through

    graph = load_graph_of(workflow_id)
    child_id = graph.node(node).child_workflow_id or ""
    state = job_state(coordinator_job_id(child_id))
    if state is None:
        # The child may have succeeded long ago and had its rows evicted since (the link
        # starts watching only once its own dependencies complete): its checkpoint, which
        # is kept, is the evidence.
        checkpoint = workflow_checkpoint_load(child_id)
        if checkpoint is not None and checkpoint.outcome == Outcome.SUCCEEDED:
            state = State.COMPLETED.value
    if state == State.COMPLETED:
        return {"child_workflow_id": child_id, "outcome": "succeeded"}
    if state is None or State(state) in _FAILED:
        raise Skip(f"child workflow {child_id!r} is {state or 'missing'}")
    cycle = cycle_through(workflow_id, child_id)
    if cycle is not None:
        raise Skip(
            f"child-workflow links form a cycle, {' -> '.join(cycle)}: none of these "
            "workflows can finish"
        )
    raise Snooze(headgate_settings.COORDINATOR_POLL)

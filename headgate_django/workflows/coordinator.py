"""The coordinator: an ordinary job (kind ``headgate:workflow``) that drives one workflow.

Each tick revalidates the stored graph (a forged or corrupted payload archives the
coordinator before any node is touched), reads every node's job in bounded set-based
queries, records new completions in the fenced checkpoint and applies the kernel's plan
in the same transaction. It loops while ticks make progress and otherwise snoozes for the
poll interval; a child finishing wakes it at once (see ``store.workflows``).
"""

from __future__ import annotations

from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.control import Skip, Snooze
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.graph import GraphSpec
from headgate_django.kernel.workflow import Outcome, evaluate
from headgate_django.registry import task
from headgate_django.store import db_now
from headgate_django.store.workflows import (
    COORDINATOR_KIND,
    checkpoint_from_row,
    coordinator_job_id,
    to_ms,
    workflow_checkpoint_load,
    workflow_nodes_read,
    workflow_tick_save,
)

#: Ticks per attempt while each one makes progress, before yielding the worker.
MAX_PASSES = 50


def load_graph(graph: Any) -> GraphSpec:
    """The stored graph, revalidated; ``Skip`` (archive) when it is not a valid graph."""
    try:
        return GraphSpec.from_json(graph)
    except DefinitionError as exc:
        raise Skip(f"invalid workflow graph: {exc}") from exc


@task(kind=COORDINATOR_KIND, queue="headgate-workflow", max_attempts=25)
def coordinate(
    ctx: JobContext, graph: Any = None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec = load_graph(graph)
    if ctx.job_id != coordinator_job_id(spec.workflow_id):
        raise Skip(f"coordinator {ctx.job_id} does not belong to workflow {spec.workflow_id!r}")
    options = options or {}
    for _ in range(MAX_PASSES):
        outcome, mutated = tick(ctx, spec, options)
        if outcome is Outcome.SUCCEEDED:
            return {"workflow_id": spec.workflow_id, "outcome": "succeeded"}
        if not mutated:
            break
    raise Snooze(headgate_settings.COORDINATOR_POLL)


def tick(ctx: JobContext, spec: GraphSpec, options: dict[str, Any]) -> tuple[Outcome, bool]:
    row = workflow_checkpoint_load(spec.workflow_id)
    if row is not None and row.outcome == Outcome.SUCCEEDED:
        return Outcome.SUCCEEDED, False
    if row is not None and row.outcome == Outcome.FAILED:
        raise Skip(_failure_reason(row.history))
    checkpoint = checkpoint_from_row(row)
    rows = workflow_nodes_read({n.name: n.job_id for n in spec.nodes})
    plan = evaluate(
        spec,
        checkpoint,
        rows,
        keep_blocked=bool(options.get("failed_subgraph_retry")),
        now_ms=to_ms(db_now()) or 0,
    )
    if plan.changed or row is None or plan.outcome is not Outcome.WAITING:
        workflow_tick_save(
            ctx.lease, workflow_id=spec.workflow_id, checkpoint=checkpoint, plan=plan
        )
    if plan.outcome is Outcome.FAILED:
        raise Skip(plan.reason or "a node failed")
    return plan.outcome, plan.mutates


def _failure_reason(history: list[dict[str, Any]]) -> str:
    for event in reversed(history):
        if event.get("event") == "workflow_failed":
            return str(event.get("reason") or "workflow failed")
    return "workflow failed"

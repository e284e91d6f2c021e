"""The coordinator: an ordinary job (kind ``headgate:workflow``) that drives one workflow.

Each tick revalidates the stored graph (a forged or corrupted payload archives the
coordinator before any node is touched), settles retry and graft receipts, reads every
node's job in bounded set-based queries, and writes the kernel's plan through one fenced
transaction that saves the checkpoint before it promotes anything. It loops while ticks
make progress and otherwise snoozes for the poll interval; a child finishing wakes it at
once (see ``store.workflows``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from headgate_django import metrics
from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.control import Skip, Snooze
from headgate_django.envelope import canonical_json, decode_call
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.graph import GraphSpec, NodeSpec, check_conditions_budget, combine
from headgate_django.kernel.states import State
from headgate_django.kernel.workflow import (
    FAILED_STATES,
    Checkpoint,
    NodeRow,
    Outcome,
    evaluate,
    node_states,
)
from headgate_django.models import Job, WorkflowCheckpoint
from headgate_django.store import db_now
from headgate_django.store.workflows import (
    GRAFT_KIND,
    RETRY_KIND,
    checkpoint_from_row,
    coordinator_job_id,
    graft_receipt_id,
    retry_receipt_id,
    to_ms,
    workflow_checkpoint_load,
    workflow_graft_decide,
    workflow_nodes_read,
    workflow_pending_receipt,
    workflow_retry_apply,
    workflow_tick_save,
)

_NEEDS_REPAIR = frozenset({State.QUARANTINED.value, State.UNDECODABLE.value})

#: Ticks per attempt while each one makes progress, before yielding the worker.
MAX_PASSES = 50


def load_graph(graph: Any) -> GraphSpec:
    """The stored graph, revalidated; ``Skip`` (archive) when it is not a valid graph.

    Validation is memoised by a digest of the exact stored content: a payload altered in
    any way is validated afresh, while a 999-node graph is not re-checked on every wake.
    """
    try:
        return _validated(hashlib.sha256(canonical_json(graph)).hexdigest(), graph)
    except DefinitionError as exc:
        raise Skip(f"invalid workflow graph: {exc}") from exc


_VALIDATED: dict[str, GraphSpec] = {}
_VALIDATED_MAX = 256


def _validated(digest: str, graph: Any) -> GraphSpec:
    spec = _VALIDATED.get(digest)
    if spec is None:
        spec = GraphSpec.from_json(graph)
        if len(_VALIDATED) >= _VALIDATED_MAX:
            _VALIDATED.pop(next(iter(_VALIDATED)))
        _VALIDATED[digest] = spec
    return spec


def coordinate(
    ctx: JobContext, graph: Any = None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The handler of kind ``headgate:workflow`` (registered by :mod:`.handlers`)."""
    base = load_graph(graph)
    if ctx.job_id != coordinator_job_id(base.workflow_id):
        raise Skip(f"coordinator {ctx.job_id} does not belong to workflow {base.workflow_id!r}")
    tick = Tick(ctx, base, options or {})
    for _ in range(MAX_PASSES):
        outcome, progressed = tick.run()
        if outcome is Outcome.SUCCEEDED:
            metrics.observe_workflow("succeeded")
            return {"workflow_id": base.workflow_id, "outcome": "succeeded"}
        if not progressed:
            break
    raise Snooze(headgate_settings.COORDINATOR_POLL)


class Tick:
    def __init__(self, ctx: JobContext, base: GraphSpec, options: dict[str, Any]) -> None:
        self.ctx = ctx
        self.base = base
        self.options = options
        self.workflow_id = base.workflow_id

    def run(self) -> tuple[Outcome, bool]:
        row = workflow_checkpoint_load(self.workflow_id, forget_earlier=True)
        checkpoint = checkpoint_from_row(row)
        grafts = list(row.grafts) if row is not None else []
        graph = self._graph(grafts)
        if row is not None and row.outcome == Outcome.SUCCEEDED:
            return Outcome.SUCCEEDED, False
        if row is not None and row.outcome in (Outcome.FAILED, Outcome.RETRY_PENDING):
            return self._retry(row, checkpoint, graph), True
        if self._graft(checkpoint, graph, grafts):
            return Outcome.WAITING, True
        return self._evaluate(row, checkpoint, graph)

    def _graph(self, grafts: list[dict[str, Any]]) -> GraphSpec:
        if not grafts:
            return self.base
        try:
            return combine(self.base, [NodeSpec.from_json(n) for n in grafts])
        except DefinitionError as exc:
            raise Skip(f"invalid grafted graph: {exc}") from exc

    def _evaluate(
        self, row: WorkflowCheckpoint | None, checkpoint: Checkpoint, graph: GraphSpec
    ) -> tuple[Outcome, bool]:
        rows = workflow_nodes_read({n.name: n.job_id for n in graph.nodes})
        plan = evaluate(
            graph,
            checkpoint,
            rows,
            keep_blocked=bool(self.options.get("failed_subgraph_retry")),
            now_ms=to_ms(db_now()) or 0,
            retry_due=self._auto_retry_due(checkpoint, rows),
        )
        if plan.changed or row is None or plan.outcome is not Outcome.WAITING:
            saved = workflow_tick_save(
                self.ctx.lease,
                workflow_id=self.workflow_id,
                checkpoint=checkpoint,
                plan=plan,
                graft_receipt=graft_receipt_id(self.workflow_id, checkpoint.revision + 1),
            )
            if not saved:
                # A graft arrived after this tick read the nodes: decide it first.
                return Outcome.WAITING, True
        if plan.outcome is Outcome.RETRY_PENDING:
            raise Snooze(timedelta(milliseconds=self.options["automatic_retry"]["backoff_ms"]))
        if plan.outcome is Outcome.FAILED:
            metrics.observe_workflow("failed")
            raise Skip(plan.reason or "a node failed")
        return plan.outcome, plan.mutates

    def _auto_retry_due(self, checkpoint: Checkpoint, rows: Mapping[str, NodeRow]) -> bool:
        """A further generation is due unless the limit is reached or a node needs an
        operator's repair first (quarantined or undecodable: retrying blindly would only
        burn the remaining generations)."""
        policy = self.options.get("automatic_retry")
        if not policy or checkpoint.generation >= int(policy["max_generations"]):
            return False
        return not any(r.state in _NEEDS_REPAIR for r in rows.values())

    # -- failed-subgraph retry ------------------------------------------------------------
    def _retry(self, row: WorkflowCheckpoint, checkpoint: Checkpoint, graph: GraphSpec) -> Outcome:
        """Open the next generation if a retry receipt (or an automatic retry) is due."""
        revision = checkpoint.revision + 1
        receipt = workflow_pending_receipt(retry_receipt_id(self.workflow_id, revision), RETRY_KIND)
        automatic = row.outcome == Outcome.RETRY_PENDING
        if receipt is None and not automatic:
            raise Skip(_failure_reason(row.history))
        if automatic:
            # As a manual request does: a failed child workflow is retried before its
            # link is reopened, or the link would only fail again.
            from headgate_django.workflows.retry import retry_children_automatically

            retry_children_automatically(graph.nodes)
        rows = workflow_nodes_read({n.name: n.job_id for n in graph.nodes})
        states = node_states(graph, checkpoint, rows)
        reopen = [
            n.job_id
            for n in graph.nodes
            if states[n.name] in FAILED_STATES and states[n.name] != "missing"
        ]
        checkpoint.revision = revision
        checkpoint.generation += 1
        checkpoint.failed = False
        checkpoint.record(
            "workflow_retry_accepted",
            to_ms(db_now()),
            automatic=automatic,
            nodes=[n.name for n in graph.nodes if n.job_id in reopen],
        )
        competing = workflow_pending_receipt(
            graft_receipt_id(self.workflow_id, revision), GRAFT_KIND
        )
        competing_ids: list[str] = []
        reason = f"a failed-subgraph retry took revision {revision}"
        if competing is not None:
            _, specs = _graft_nodes_of(competing)
            competing_ids = _spec_values(specs, "job_id")
            _record_rejection(checkpoint, competing.id, specs, reason)
        workflow_retry_apply(
            self.ctx.lease,
            workflow_id=self.workflow_id,
            checkpoint=checkpoint,
            reopen_job_ids=reopen,
            receipt_id=receipt.id if receipt is not None else None,
            reject_receipt_id=competing.id if competing is not None else None,
            reject_job_ids=competing_ids,
            reject_reason=reason,
        )
        return Outcome.WAITING

    # -- grafts ---------------------------------------------------------------------------
    def _graft(
        self, checkpoint: Checkpoint, graph: GraphSpec, grafts: list[dict[str, Any]]
    ) -> bool:
        """Accept or reject a pending graft receipt for the next revision."""
        receipt = workflow_pending_receipt(
            graft_receipt_id(self.workflow_id, checkpoint.revision + 1), GRAFT_KIND
        )
        if receipt is None:
            return False
        expected, specs = _graft_nodes_of(receipt)
        job_ids = _spec_values(specs, "job_id")
        reason = ""
        try:
            if expected != checkpoint.revision:
                raise DefinitionError(
                    f"graft expects revision {expected}, workflow is at {checkpoint.revision}"
                )
            if checkpoint.failed:
                raise DefinitionError("the workflow has failed")
            new_nodes = [NodeSpec.from_json(s) for s in specs]
            check_conditions_budget(combine(graph, new_nodes))
        except DefinitionError as exc:
            reason = str(exc)
        accepted = not reason
        if accepted:
            checkpoint.revision += 1
            grafts = [*grafts, *specs]
            checkpoint.record(
                "workflow_graft_accepted", to_ms(db_now()), nodes=[s["name"] for s in specs]
            )
        else:
            # Submission checks the same rules, so this is a receipt that raced a change of
            # the workflow or was written around submit_graft: say why it went away.
            _record_rejection(checkpoint, receipt.id, specs, reason)
        workflow_graft_decide(
            self.ctx.lease,
            workflow_id=self.workflow_id,
            receipt=receipt,
            accepted=accepted,
            checkpoint=checkpoint,
            grafts=grafts,
            node_job_ids=job_ids,
            reason=reason,
        )
        return True


def _failure_reason(history: list[dict[str, Any]]) -> str:
    for event in reversed(history):
        if event.get("event") == "workflow_failed":
            return str(event.get("reason") or "workflow failed")
    return "workflow failed"


def _graft_nodes_of(receipt: Job) -> tuple[int, list[dict[str, Any]]]:
    """The expected revision and node specs a graft receipt's payload carries, as
    :meth:`~headgate_django.workflows.grafts.WorkflowGraft.prepare` wrote them."""
    _, kwargs = decode_call(bytes(receipt.payload))
    return int(kwargs.get("expected_revision", 0)), list(kwargs.get("nodes") or [])


def _spec_values(specs: list[Any], key: str) -> list[str]:
    """One field of each node spec a receipt carries (a forged receipt may carry junk)."""
    return [str(s.get(key, "")) for s in specs if isinstance(s, dict)]


def _record_rejection(
    checkpoint: Checkpoint, receipt_id: str, specs: list[Any], reason: str
) -> None:
    """A refused graft leaves an event: its receipt and tasks are removed with it."""
    checkpoint.record(
        "workflow_graft_rejected",
        to_ms(db_now()),
        receipt_job_id=receipt_id,
        nodes=_spec_values(specs, "name"),
        reason=reason,
    )

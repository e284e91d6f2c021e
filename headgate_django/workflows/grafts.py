"""``WorkflowGraft``: add ordinary tasks to a running workflow, at an expected revision.

The batch is a pending receipt ``{id}:graft:{expected_revision + 1}`` plus the new pending
tasks. The receipt id is deterministic, so two writers grafting onto the same revision
collide at enqueue and exactly one wins. Submission checks the graft against the current
graph (revision, cycles, duplicate or unknown nodes) and refuses bad input at once; the
coordinator validates the combined graph again, checkpoints the new revision and only then
releases the receipt. A receipt it refuses is removed with its tasks, and the refusal is a
``workflow_graft_rejected`` event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import transaction

from headgate_django.envelope import Envelope, encode_call, internal
from headgate_django.exceptions import (
    DefinitionError,
    GraphError,
    InvalidTransitionError,
    NotFoundError,
    RevisionConflictError,
)
from headgate_django.kernel.graph import NodeKind, NodeSpec, check_conditions_budget, combine
from headgate_django.kernel.names import validate_queue, writing_ticks
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store import job_insert_many
from headgate_django.store.workflows import (
    COORDINATOR_KIND,
    GRAFT_KIND,
    checkpoint_from_row,
    graft_receipt_id,
    workflow_checkpoint_load,
    workflow_coordinator_lock,
    workflow_wake,
)
from headgate_django.workflows.inspect import current_graph

#: Coordinator states of a workflow that has not finished, so a graft can still join it.
_LIVE = frozenset(
    s.value
    for s in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RUNNING, State.RETRYABLE)
)


@dataclass(frozen=True)
class PreparedGraft:
    workflow_id: str
    revision: int  # the revision this graft creates
    receipt_job_id: str
    nodes: tuple[NodeSpec, ...]
    envelopes: list[Envelope] = field(repr=False)
    #: Whether ``.queue()`` chose the receipt's queue; if not, :func:`submit_graft` puts
    #: the receipt on the workflow's coordinator queue, which its workers serve.
    receipt_queue_chosen: bool = field(default=False, repr=False)

    def enqueue_with(self, *, using: str = "default") -> list[str]:
        """What ``enqueue(graft)`` does: :func:`submit_graft`, returning every job id."""
        submit_graft(self, using=using)
        return [env.id or "" for env in self.envelopes]


class WorkflowGraft:
    def __init__(self, workflow_id: str, expected_revision: int) -> None:
        if not isinstance(workflow_id, str) or not workflow_id:
            raise DefinitionError("a workflow id must be a non-empty string")
        if (
            isinstance(expected_revision, bool)
            or not isinstance(expected_revision, int)
            or expected_revision < 1
        ):
            raise DefinitionError(
                "expected_revision must be a positive integer (1 = the initial graph)"
            )
        self.workflow_id = workflow_id
        self.expected_revision = expected_revision
        self._queue: str | None = None
        self._nodes: list[tuple[NodeSpec, Envelope]] = []

    def queue(self, queue: str) -> WorkflowGraft:
        self._queue = validate_queue(queue)
        return self

    def add(
        self, name: str, envelope: Envelope, deps: Sequence[str] | None = None
    ) -> WorkflowGraft:
        """Only ordinary task nodes can be grafted (signals, timers, conditions and child
        links need durable rules that must exist from the start)."""
        if not isinstance(envelope, Envelope):
            raise GraphError(
                f"graft node {name!r}: only ordinary tasks (an Envelope) can be grafted", node=name
            )
        if isinstance(deps, str):
            raise GraphError(f"graft node {name!r}: deps must be a list", node=name)
        job_id = envelope.id or f"{self.workflow_id}:{name}"
        node = NodeSpec(name, job_id, NodeKind.TASK, tuple(deps or ()), envelope.kind)
        self._nodes.append((node, envelope))
        return self

    def prepare(self) -> PreparedGraft:
        from headgate_django.conf import headgate_settings

        if not self._nodes:
            raise GraphError("a graft needs at least one node")
        revision = self.expected_revision + 1
        receipt_id = graft_receipt_id(self.workflow_id, revision)
        nodes = tuple(n for n, _ in self._nodes)
        queue = self._queue or headgate_settings.WORKFLOW_QUEUE
        receipt = Envelope(
            kind=GRAFT_KIND,
            id=receipt_id,
            queue=queue,
            payload=encode_call(
                (),
                {
                    "workflow_id": self.workflow_id,
                    "expected_revision": self.expected_revision,
                    "nodes": [n.to_json() for n in nodes],
                },
            ),
            pending=True,
            retention=headgate_settings.WORKFLOW_RETENTION,
            workflow_id=self.workflow_id,
        )
        internal(receipt)  # the library's own receipt; a forged one is refused at enqueue
        tasks = [
            replace(
                env,
                id=node.job_id,
                pending=True,
                scheduled_at=None,
                delay=None,
                workflow_id=self.workflow_id,
                retention=max(
                    env.retention or headgate_settings.RETENTION,
                    headgate_settings.WORKFLOW_RETENTION,
                ),
            )
            for node, env in self._nodes
        ]
        return PreparedGraft(
            self.workflow_id,
            revision,
            receipt_id,
            nodes,
            [receipt, *tasks],
            receipt_queue_chosen=self._queue is not None,
        )


def submit_graft(graft: PreparedGraft, *, using: str = "default") -> str:
    """Enqueue a prepared graft onto a running workflow, after checking it against the
    workflow's current graph: bad input is refused here, with the reason, and writes nothing.

    ``enqueue(graft)`` does the same. The coordinator row stays locked from the checks to
    the enqueue, so the workflow cannot finish or accept another graft in between, and it
    is woken to decide at once. The coordinator still revalidates the receipt (and records
    ``workflow_graft_rejected`` when it refuses one). Returns the receipt job id.
    """
    with transaction.atomic(using=using):
        coordinator = workflow_coordinator_lock(graft.workflow_id, using=using)
        if coordinator is None or coordinator.kind != COORDINATOR_KIND:
            raise NotFoundError(f"workflow {graft.workflow_id!r} does not exist")
        if coordinator.state not in _LIVE:
            raise InvalidTransitionError(
                f"workflow {graft.workflow_id!r} has finished ({coordinator.state}); "
                "a graft cannot revive it"
            )
        row = workflow_checkpoint_load(graft.workflow_id, using=using)
        if row is not None and row.outcome == "succeeded":
            # Recorded, though the coordinator's job has not completed yet.
            raise InvalidTransitionError(
                f"workflow {graft.workflow_id!r} has succeeded; a graft cannot revive it"
            )
        checkpoint = checkpoint_from_row(row)
        if checkpoint.failed:
            raise InvalidTransitionError(
                f"workflow {graft.workflow_id!r} has failed; graft after its failed-subgraph "
                "retry has opened a new generation"
            )
        current = checkpoint.revision
        if current != graft.revision - 1:
            raise RevisionConflictError(
                f"revision conflict: workflow {graft.workflow_id!r} is at revision {current}",
                current_revision=current,
            )
        graph, _ = current_graph(coordinator, row)
        # CycleError, DuplicateNodeError, … name the nodes
        check_conditions_budget(combine(graph, graft.nodes))
        # The workflow exists (a tick's may carry the reserved prefix): its nodes' ids may
        # too, but an id the caller chose under another prefix is still refused.
        with writing_ticks([graft.workflow_id]):
            job_insert_many(_fitted(graft, coordinator), using=using)
        workflow_wake(graft.workflow_id, using=using)
    return graft.receipt_job_id


def _fitted(graft: PreparedGraft, coordinator: Job) -> list[Envelope]:
    """The graft's envelopes fitted to the workflow, which ``prepare()`` cannot read:

    - the receipt goes on the coordinator's queue unless ``.queue()`` chose one (a receipt
      released on a queue no worker of the workflow serves would stay ``available`` for
      ever; a retry receipt uses the coordinator's queue too);
    - every retention is raised to at least the workflow's own (``Workflow.retention``),
      as the workflow's declared nodes were, not only to the default workflow retention.
    """
    keep = coordinator.retention
    receipt, *tasks = graft.envelopes
    changes: dict[str, Any] = {}
    if not graft.receipt_queue_chosen and receipt.queue != coordinator.queue:
        changes["queue"] = coordinator.queue
    if keep is not None and (receipt.retention is None or receipt.retention < keep):
        changes["retention"] = keep
    if changes:
        receipt = internal(replace(receipt, **changes))
    if keep is not None:
        tasks = [
            replace(t, retention=keep) if t.retention is None or t.retention < keep else t
            for t in tasks
        ]
    return [receipt, *tasks]

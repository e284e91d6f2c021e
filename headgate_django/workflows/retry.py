"""``request_failed_subgraph_retry``: reopen a failed workflow as a new generation.

The request checks the exact revision, applies the operator's repairs (release a
quarantined node's fingerprint, replace an undecodable node's payload), requests linked
children's retries first, then — in one transaction — enqueues the deterministic retry
receipt and reopens the coordinator. The coordinator checkpoints generation + 1 and
revision + 1 before it puts the failed nodes back; completed ancestors never rerun.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from headgate_django.envelope import Envelope, encode_call, internal
from headgate_django.exceptions import (
    DefinitionError,
    InvalidTransitionError,
    NotFoundError,
    RevisionConflictError,
)
from headgate_django.kernel.graph import NodeKind
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store import job_insert_many, job_replace_payload, quarantine_release
from headgate_django.store.operator import workflow_coordinator_reopen
from headgate_django.store.reads import job_get_many, job_state
from headgate_django.store.workflows import (
    COORDINATOR_KIND,
    RETRY_KIND,
    checkpoint_from_row,
    coordinator_job_id,
    retry_receipt_id,
    workflow_checkpoint_load,
    workflow_coordinator_lock,
    workflow_nodes_read,
)
from headgate_django.workflows.inspect import current_graph

_NEEDS_REPAIR = frozenset({State.QUARANTINED.value, State.UNDECODABLE.value})
#: What the request reads of each node's job: never a payload or a result, which for a
#: large workflow could add up to gigabytes.
_LEAN = ("id", "state", "fingerprint")


@dataclass(frozen=True)
class Recovery:
    """A repair for one node: release its quarantine, or replace its undecodable payload."""

    node: str
    release_quarantine: bool = False
    payload: bytes | None = None
    schema_version: int | None = None

    @classmethod
    def from_value(cls, value: Recovery | Mapping[str, Any]) -> Recovery:
        if isinstance(value, Recovery):
            return value
        payload = value.get("payload")
        if isinstance(payload, str):
            try:
                payload = base64.b64decode(payload, validate=True)
            except ValueError as exc:
                raise DefinitionError(
                    f"recovery for {value.get('node')!r}: payload is not base64"
                ) from exc
        return cls(
            node=str(value.get("node", "")),
            release_quarantine=bool(value.get("release_quarantine", False)),
            payload=payload,
            schema_version=value.get("schema_version"),
        )


@dataclass(frozen=True)
class RetryReceipt:
    workflow_id: str
    revision: int
    generation: int
    receipt_job_id: str


def request_failed_subgraph_retry(
    workflow_id: str,
    expected_revision: int,
    recoveries: Iterable[Recovery | Mapping[str, Any]] = (),
) -> RetryReceipt:
    if isinstance(expected_revision, bool) or not isinstance(expected_revision, int):
        raise DefinitionError(
            f"expected_revision must be an integer (1 = the initial graph), "
            f"got {expected_revision!r}"
        )
    repairs = [Recovery.from_value(r) for r in recoveries]
    with transaction.atomic():
        # Locked first, as submit_graft does: a concurrent request waits here and then
        # sees the workflow reopened, instead of checking a state that changes under it.
        coordinator = workflow_coordinator_lock(workflow_id)
        if coordinator is None or coordinator.kind != COORDINATOR_KIND:
            raise NotFoundError(f"workflow {workflow_id!r} does not exist", workflow_id=workflow_id)
        row = workflow_checkpoint_load(workflow_id)
        # Accepted grafted nodes are checked and repaired like declared ones.
        graph, options = current_graph(coordinator, row)
        if not options.get("failed_subgraph_retry"):
            raise DefinitionError(
                f"workflow {workflow_id!r} was not prepared with failed_subgraph_retry()"
            )
        if coordinator.state != State.ARCHIVED:
            raise InvalidTransitionError(
                f"workflow {workflow_id!r} is {coordinator.state}; only a failed (archived) "
                "workflow can be retried"
            )
        checkpoint = checkpoint_from_row(row)
        if checkpoint.revision != expected_revision:
            raise RevisionConflictError(
                f"revision conflict: workflow {workflow_id!r} is at revision "
                f"{checkpoint.revision}, not {expected_revision}",
                current_revision=checkpoint.revision,
            )
        jobs = job_get_many((n.job_id for n in graph.nodes), only=_LEAN)
        by_name = {n.name: n for n in graph.nodes}
        # A repaired undecodable node keeps its state until the coordinator reopens it
        # (with the other failed nodes), so it is not "stuck" once it has a new payload.
        repaired = {job_id for repair in repairs if (job_id := _repair(repair, by_name, jobs))}
        _retry_children(graph.nodes, jobs)
        rows = workflow_nodes_read({n.job_id: n.job_id for n in graph.nodes})
        stuck_nodes = [
            f"{job_id} ({r.state})"
            for job_id, r in rows.items()
            if r.state in _NEEDS_REPAIR
            and not (job_id in repaired and r.state == State.UNDECODABLE.value)
        ]
        if stuck_nodes:
            raise InvalidTransitionError(
                "cannot reopen the workflow while nodes stay quarantined or undecodable: "
                + ", ".join(stuck_nodes)
                + " — pass recoveries (release_quarantine, or payload + schema_version)"
            )
        revision = expected_revision + 1
        receipt_id = retry_receipt_id(workflow_id, revision)
        receipt = Envelope(
            kind=RETRY_KIND,
            id=receipt_id,
            queue=coordinator.queue,
            payload=encode_call((), {"workflow_id": workflow_id, "revision": revision}),
            pending=True,
            retention=coordinator.retention,
            workflow_id=workflow_id,
        )
        job_insert_many([internal(receipt)])
        workflow_coordinator_reopen(coordinator.id)
    return RetryReceipt(workflow_id, revision, checkpoint.generation + 1, receipt_id)


def _repair(repair: Recovery, by_name: dict[str, Any], jobs: dict[str, Job]) -> str | None:
    """Apply one recovery; returns the job id whose undecodable payload was replaced."""
    node = by_name.get(repair.node)
    if node is None:
        raise NotFoundError(f"recovery names unknown node {repair.node!r}")
    job = jobs.get(node.job_id)
    if job is None:
        raise NotFoundError(f"node {repair.node!r} has no job to repair")
    if job.state == State.QUARANTINED:
        if not repair.release_quarantine:
            raise DefinitionError(f"node {repair.node!r} is quarantined: set release_quarantine")
        quarantine_release(job.fingerprint)
    elif job.state == State.UNDECODABLE:
        if repair.payload is None or not repair.schema_version or repair.schema_version < 1:
            raise DefinitionError(
                f"node {repair.node!r} is undecodable: give a replacement payload and a "
                "positive schema_version"
            )
        job_replace_payload(job.id, payload=repair.payload, schema_version=repair.schema_version)
        return job.id
    return None


def retry_children_automatically(nodes: Iterable[Any]) -> list[str]:
    """What an automatic retry does for failed child links before reopening them: request
    each failed child workflow's own retry, as the manual request does (a link reopened
    while its child stays archived would only fail again and burn a generation).

    A child that cannot be retried (not prepared with ``failed_subgraph_retry()``, or a
    node needing an operator's repair) is left as it is: its link fails again, as it would
    have. Returns the child workflow ids whose retry was requested.
    """
    links = [n for n in nodes if n.kind is NodeKind.CHILD_WORKFLOW]
    requested: list[str] = []
    jobs = job_get_many((n.job_id for n in links), only=_LEAN)
    for child, revision in _failed_children(links, jobs):
        try:
            request_failed_subgraph_retry(child, revision)
        except (DefinitionError, InvalidTransitionError, RevisionConflictError, NotFoundError):
            continue
        requested.append(child)
    return requested


def _retry_children(nodes: Iterable[Any], jobs: dict[str, Job]) -> None:
    """A failed child link is reopened only after its child workflow's own retry."""
    for child, revision in _failed_children(nodes, jobs):
        request_failed_subgraph_retry(child, revision)


def _failed_children(nodes: Iterable[Any], jobs: dict[str, Job]) -> Iterator[tuple[str, int]]:
    """The child workflows, with their current revisions, of the archived links among
    ``nodes`` whose child workflow is archived too (failed)."""
    for node in nodes:
        job = jobs.get(node.job_id)
        if node.kind is not NodeKind.CHILD_WORKFLOW or job is None or job.state != State.ARCHIVED:
            continue
        child = node.child_workflow_id or ""
        if job_state(coordinator_job_id(child)) == State.ARCHIVED:
            yield child, checkpoint_from_row(workflow_checkpoint_load(child)).revision

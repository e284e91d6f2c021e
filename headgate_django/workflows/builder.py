"""``Workflow``: declare a DAG of jobs and prepare it as one atomic batch.

The batch holds the coordinator job (``{id}:coordinator``, kind ``headgate:workflow``,
payload = the validated graph) followed by every node as a ``pending`` job
(``{id}:{name}``), so ``enqueue(batch)`` creates all of it or none of it, inside the
caller's transaction when there is one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from headgate_django.envelope import (
    Envelope,
    check_payload_size,
    decode_call,
    encode_call,
    internal,
)
from headgate_django.exceptions import DefinitionError, GraphError
from headgate_django.kernel import cel
from headgate_django.kernel.graph import (
    GraphSpec,
    NodeKind,
    NodeSpec,
    check_conditions_budget,
    validate,
)
from headgate_django.kernel.names import (
    CHILD_KIND,
    CONDITION_KIND,
    SIGNAL_KIND,
    TIMER_KIND,
    check_not_reserved,
    internal_kind_error,
    is_internal_kind,
    validate_queue,
)
from headgate_django.store.workflows import (
    COORDINATOR_KIND,
    WAITERS,
    coordinator_job_id,
    from_ms,
)

_COORDINATOR_SUFFIX = len(":coordinator")


@dataclass(frozen=True)
class PreparedWorkflow:
    """What ``prepare()`` returns: pass it to :func:`headgate_django.enqueue`."""

    workflow_id: str
    graph: GraphSpec
    envelopes: list[Envelope] = field(repr=False)


def with_waiters(prepared: PreparedWorkflow, link_job_ids: list[str]) -> PreparedWorkflow:
    """``prepared`` whose coordinator, when it finishes, wakes these link jobs of parent
    workflows in the same commit (a bundle knows them; the links poll only as a fallback)."""
    if not link_job_ids:
        return prepared
    coordinator, *nodes = prepared.envelopes
    _, kwargs = decode_call(coordinator.payload)
    kwargs["options"] = {**kwargs.get("options", {}), WAITERS: sorted(link_job_ids)}
    coordinator = internal(replace(coordinator, payload=encode_call((), kwargs)))
    return replace(prepared, envelopes=[coordinator, *nodes])


def _require_timedelta(value: object, what: str) -> None:
    """A duration must be a ``timedelta``: a bare number has no unit to read it in."""
    if not isinstance(value, timedelta):
        raise DefinitionError(f"{what} must be a datetime.timedelta, got {value!r}")


def _deps(deps: Iterable[str] | None, name: str) -> tuple[str, ...]:
    if deps is None:
        return ()
    if isinstance(deps, str):
        raise GraphError(
            f"node {name!r}: deps must be a list of node names, not a string", node=name
        )
    return tuple(deps)


class Workflow:
    """A DAG of jobs driven by a coordinator. Methods chain; nothing is written until
    the prepared batch is enqueued."""

    def __init__(self, workflow_id: str) -> None:
        if not isinstance(workflow_id, str) or not workflow_id:
            raise DefinitionError("a workflow id must be a non-empty string")
        if len(workflow_id.encode()) > 255 - _COORDINATOR_SUFFIX:
            raise DefinitionError(f"workflow id {workflow_id[:40]!r}… is too long")
        check_not_reserved("workflow id", workflow_id)
        self.workflow_id = workflow_id
        self._queue: str | None = None
        self._retention: timedelta | None = None
        self._nodes: list[NodeSpec] = []
        self._envelopes: dict[str, Envelope | None] = {}
        self._failed_subgraph_retry = False
        self._automatic_retry: dict[str, int] | None = None

    # -- options -----------------------------------------------------------------------
    def coordinator_queue(self, queue: str) -> Workflow:
        self._queue = validate_queue(queue)
        return self

    def retention(self, retention: timedelta) -> Workflow:
        _require_timedelta(retention, "workflow retention")
        if retention < timedelta(milliseconds=1):
            raise DefinitionError("workflow retention must be at least 1 ms")
        self._retention = retention
        return self

    def failed_subgraph_retry(self) -> Workflow:
        """Keep dependency-blocked work when a node fails, so the failed subgraph can be retried."""
        self._failed_subgraph_retry = True
        return self

    def automatic_retry(self, max_generations: int, backoff: timedelta) -> Workflow:
        """Retry the failed subgraph automatically; the limit includes the first run."""
        if isinstance(max_generations, bool) or not isinstance(max_generations, int):
            raise DefinitionError(
                f"automatic_retry max_generations must be an integer, got {max_generations!r}"
            )
        _require_timedelta(backoff, "automatic_retry backoff")
        if max_generations < 2:
            raise DefinitionError(
                "automatic_retry needs max_generations ≥ 2 (the first run counts)"
            )
        if backoff < timedelta(milliseconds=1):
            raise DefinitionError("automatic_retry backoff must be at least 1 ms")
        self._failed_subgraph_retry = True
        self._automatic_retry = {
            "max_generations": max_generations,
            "backoff_ms": int(backoff.total_seconds() * 1000),
        }
        return self

    # -- nodes -------------------------------------------------------------------------
    def _node(
        self,
        name: str,
        kind: NodeKind,
        deps: Iterable[str] | None,
        job_kind: str,
        envelope: Envelope | None = None,
        **extra: Any,
    ) -> Workflow:
        job_id = (
            envelope.id if envelope is not None and envelope.id else None
        ) or f"{self.workflow_id}:{name}"
        node = NodeSpec(
            name=name, job_id=job_id, kind=kind, deps=_deps(deps, name), job_kind=job_kind, **extra
        )
        self._nodes.append(node)
        self._envelopes[name] = envelope
        return self

    def add(self, name: str, envelope: Envelope, deps: Sequence[str] | None = None) -> Workflow:
        """An ordinary task node: ``envelope`` runs once every dependency has completed."""
        if not isinstance(envelope, Envelope):
            raise DefinitionError(f"node {name!r}: expected an Envelope (use task.envelope(...))")
        if is_internal_kind(envelope.kind):
            raise internal_kind_error(envelope.kind, "a node must be a task", node=name)
        return self._node(name, NodeKind.TASK, deps, envelope.kind, envelope)

    def add_signal(self, name: str, signal: str, deps: Sequence[str] | None = None) -> Workflow:
        """A node that completes when ``signal`` is emitted to this workflow (buffered)."""
        return self._node(name, NodeKind.SIGNAL, deps, SIGNAL_KIND, signal=signal)

    def add_timer_at(self, name: str, unix_ms: int, deps: Sequence[str] | None = None) -> Workflow:
        """A node that completes at an absolute instant (Unix milliseconds, store clock)."""
        return self._node(name, NodeKind.TIMER, deps, TIMER_KIND, wake_at_ms=unix_ms)

    def add_timer_after(self, name: str, delay: timedelta, deps: Sequence[str]) -> Workflow:
        """A node that completes ``delay`` after its latest dependency finished (store time)."""
        if not deps:
            raise GraphError(
                f"timer {name!r}: a relative timer needs at least one dependency", node=name
            )
        _require_timedelta(delay, f"timer {name!r}: the delay")
        delay_ms = int(delay.total_seconds() * 1000)
        return self._node(name, NodeKind.TIMER, deps, TIMER_KIND, delay_ms=delay_ms)

    def add_condition(
        self, name: str, expression: str, deps: Sequence[str] | None = None
    ) -> Workflow:
        """A node that completes once the CEL ``expression`` is true over the workflow state."""
        return self._node(name, NodeKind.CONDITION, deps, CONDITION_KIND, condition=expression)

    def add_child(
        self, name: str, child_workflow_id: str, deps: Sequence[str] | None = None
    ) -> Workflow:
        """A node that completes when the child workflow succeeds (fails when it fails)."""
        return self._node(
            name, NodeKind.CHILD_WORKFLOW, deps, CHILD_KIND, child_workflow_id=child_workflow_id
        )

    # -- prepare -----------------------------------------------------------------------
    def graph(self) -> GraphSpec:
        return check_conditions_budget(validate(GraphSpec(self.workflow_id, tuple(self._nodes))))

    def prepare(self) -> PreparedWorkflow:
        """Validate the graph (and compile its conditions) and build the atomic batch."""
        from headgate_django.conf import headgate_settings

        graph = self.graph()
        for node in graph.nodes:
            # Signal, timer, condition and child nodes are the library's own envelopes,
            # which enqueue does not check: ``sched`` with a node ``x:5`` is ``sched:x:5``.
            check_not_reserved("job id", node.job_id)
            if node.condition is not None:
                cel.compile(node.condition)
        retention = self._retention or headgate_settings.WORKFLOW_RETENTION
        coordinator = internal(
            Envelope(
                kind=COORDINATOR_KIND,
                id=coordinator_job_id(self.workflow_id),
                queue=self._queue or headgate_settings.WORKFLOW_QUEUE,
                payload=encode_call((), {"graph": graph.to_json(), "options": self._options()}),
                retention=retention,
                workflow_id=self.workflow_id,
            )
        )
        # The graph is the coordinator's payload: a graph within every per-field limit can
        # still be over MAX_PAYLOAD_BYTES, said here with the rule enqueue applies to it.
        check_payload_size(
            len(coordinator.payload),
            f"graph of workflow {self.workflow_id!r} (its coordinator job's payload)",
        )
        children = [self._child(node, retention) for node in graph.nodes]
        return PreparedWorkflow(self.workflow_id, graph, [coordinator, *children])

    def _options(self) -> dict[str, Any]:
        return {
            "failed_subgraph_retry": self._failed_subgraph_retry,
            "automatic_retry": self._automatic_retry,
        }

    def _child(self, node: NodeSpec, retention: timedelta) -> Envelope:
        from headgate_django.conf import headgate_settings

        env = self._envelopes[node.name]
        built = env is None  # a signal, timer, condition or child node: the library's own job
        if env is None:
            env = Envelope(
                kind=node.job_kind,
                payload=encode_call((), {"workflow_id": self.workflow_id, "node": node.name}),
                queue=self._queue or headgate_settings.WORKFLOW_QUEUE,
            )
        keep = max(
            env.retention if env.retention is not None else headgate_settings.RETENTION, retention
        )
        timing: dict[str, Any] = {"pending": True, "scheduled_at": None, "delay": None}
        if node.kind is NodeKind.TIMER and node.wake_at_ms is not None:
            timing = {"pending": False, "scheduled_at": from_ms(node.wake_at_ms), "delay": None}
        env = replace(env, id=node.job_id, workflow_id=self.workflow_id, retention=keep, **timing)
        return internal(env) if built else env

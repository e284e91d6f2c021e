"""One coordinator tick, decided without I/O.

The coordinator reads the graph, its checkpoint and the state of every node's job, then
asks :func:`evaluate` what to do. The answer (a :class:`Plan`) lists the completions to
record as evidence, the history events to append, and the mutations to apply; the store
writes the checkpoint first and applies the mutations in the same fenced transaction.

Node semantics:
- a task or child-workflow node is complete when its job completed (or the checkpoint
  holds evidence that it did — the row may since have been evicted);
- a signal, timer or condition node is complete only when its job completed AND all of
  its own dependencies are complete, so an early signal or an early absolute timer is
  buffered until the graph reaches it;
- a node whose job is archived, cancelled, quarantined, undecodable, or missing without
  evidence has failed; it and its descendants are the failure closure. Never-run nodes of
  the closure are deleted (kept with failed-subgraph retry); work outside it still runs,
  and the workflow fails once everything outside the closure has completed (Headgate's
  rule: independent branches keep their results and no pending job is orphaned).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from headgate_django.exceptions import ConditionEvaluationError
from headgate_django.kernel import cel
from headgate_django.kernel.graph import (
    LAST_INSTANT_MS,
    GraphSpec,
    NodeKind,
    NodeSpec,
    failure_closure,
    topological_order,
)
from headgate_django.kernel.states import State

MAX_HISTORY = 256
MISSING = "missing"

#: Job states that fail their node.
FAILED_STATES = frozenset(
    {State.ARCHIVED, State.CANCELLED, State.QUARANTINED, State.UNDECODABLE, MISSING}
)
#: States of doomed descendants that are deleted because they never ran.
DELETABLE_STATES = frozenset({State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE})
_BUFFERED = frozenset({NodeKind.SIGNAL, NodeKind.TIMER, NodeKind.CONDITION})
_EVENT_BY_KIND = {
    NodeKind.SIGNAL: "signal_consumed",
    NodeKind.TIMER: "timer_fired",
    NodeKind.CONDITION: "condition_satisfied",
}


class Outcome(StrEnum):
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY_PENDING = "retry_pending"  # failed; an automatic retry is due after its backoff


@dataclass(frozen=True)
class NodeRow:
    """What the store says about one node's job."""

    state: str  # a job state, or "missing" when the row is gone
    finalized_at_ms: int | None = None


@dataclass
class Checkpoint:
    """The coordinator's durable memory (one row per workflow, fenced by its lease)."""

    revision: int = 1
    generation: int = 1
    completed: dict[str, int] = field(default_factory=dict)  # node → completed_at_ms
    failed: bool = False
    started: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    next_sequence: int = 1

    def record(self, event: str, at_ms: int | None = None, **extra: Any) -> dict[str, Any]:
        """Append a history event, keeping the newest :data:`MAX_HISTORY`."""
        entry = {
            "sequence": self.next_sequence,
            "event": event,
            "revision": self.revision,
            "generation": self.generation,
            **({"at_ms": at_ms} if at_ms is not None else {}),
            **extra,
        }
        self.next_sequence += 1
        self.history.append(entry)
        del self.history[:-MAX_HISTORY]
        return entry


@dataclass
class Plan:
    """What one tick decided. Job ids, not node names, so the store can apply it."""

    new_completions: dict[str, int] = field(default_factory=dict)
    promote: list[str] = field(default_factory=list)
    schedule: list[tuple[str, int]] = field(default_factory=list)  # (job id, at_ms)
    delete: list[str] = field(default_factory=list)
    fail: list[tuple[str, str]] = field(default_factory=list)  # (job id, reason)
    outcome: Outcome = Outcome.WAITING
    reason: str | None = None

    @property
    def mutates(self) -> bool:
        return bool(self.promote or self.schedule or self.delete or self.fail)

    @property
    def changed(self) -> bool:
        return self.mutates or bool(self.new_completions)


def node_states(
    graph: GraphSpec, checkpoint: Checkpoint, rows: Mapping[str, NodeRow]
) -> dict[str, str]:
    """Each node's effective state: evidence wins over an evicted or missing row."""
    return {
        node.name: State.COMPLETED.value
        if node.name in checkpoint.completed
        else rows.get(node.name, NodeRow(MISSING)).state
        for node in graph.nodes
    }


def evaluate(
    graph: GraphSpec,
    checkpoint: Checkpoint,
    rows: Mapping[str, NodeRow],
    *,
    keep_blocked: bool = False,
    now_ms: int = 0,
    retry_due: bool = False,
) -> Plan:
    """Decide one tick and update ``checkpoint`` in memory (evidence and history).

    ``keep_blocked`` (failed-subgraph retry) keeps doomed pending descendants instead of
    deleting them, so a later generation can resume them. ``retry_due`` (an automatic
    retry policy with generations left) turns a failure into ``RETRY_PENDING``: the
    history then says ``automatic_retry_scheduled``, not ``workflow_failed``.
    """
    plan = Plan()
    if not checkpoint.started:
        checkpoint.started = True
        checkpoint.record("workflow_started", now_ms or None)
    _record_completions(graph, checkpoint, rows, plan)
    states = node_states(graph, checkpoint, rows)
    failed = [n.name for n in graph.nodes if states[n.name] in FAILED_STATES]
    doomed = failure_closure(graph, failed) if failed else set()
    if failed:
        _fail(graph, states, failed, doomed, plan, keep_blocked)
    _advance(graph, checkpoint, states, plan, doomed)
    if failed:
        # Independent branches run to completion before the workflow fails, so their
        # results are kept and no pending job is left that nobody would ever promote.
        unfinished = any(
            n.name not in checkpoint.completed for n in graph.nodes if n.name not in doomed
        )
        if not plan.mutates and not unfinished:
            checkpoint.failed = True
            if retry_due:
                plan.outcome = Outcome.RETRY_PENDING
                checkpoint.record("automatic_retry_scheduled", now_ms or None, reason=plan.reason)
            else:
                plan.outcome = Outcome.FAILED
                checkpoint.record("workflow_failed", now_ms or None, reason=plan.reason)
        return plan
    if len(checkpoint.completed) == len(graph.nodes):
        plan.outcome = Outcome.SUCCEEDED
        checkpoint.record("workflow_succeeded", now_ms or None)
    return plan


def _record_completions(
    graph: GraphSpec, checkpoint: Checkpoint, rows: Mapping[str, NodeRow], plan: Plan
) -> None:
    """Topological order makes the buffered-node fixpoint a single pass."""
    for name in topological_order(graph):
        if name in checkpoint.completed:
            continue
        node = graph.node(name)
        row = rows.get(name)
        if row is None or row.state != State.COMPLETED:
            continue
        if node.kind in _BUFFERED and not all(d in checkpoint.completed for d in node.deps):
            continue
        at = row.finalized_at_ms or 0
        checkpoint.completed[name] = at
        plan.new_completions[name] = at
        checkpoint.record("node_completed", at, node=name)
        if node.kind in _EVENT_BY_KIND:
            checkpoint.record(_EVENT_BY_KIND[node.kind], at, node=name)


def _fail(
    graph: GraphSpec,
    states: dict[str, str],
    failed: list[str],
    doomed: set[str],
    plan: Plan,
    keep_blocked: bool,
) -> None:
    # Name the causes, not the descendants this tick's deletions have made missing.
    causes = [n for n in failed if not any(d in doomed for d in graph.node(n).deps)] or failed
    first = causes[0]
    plan.reason = f"node {first!r} is {states[first]}"
    if len(causes) > 1:
        plan.reason += f" (and {len(causes) - 1} more failed node(s))"
    if keep_blocked:
        return
    for name in sorted(doomed - set(failed)):
        if states[name] in DELETABLE_STATES:
            plan.delete.append(graph.node(name).job_id)


def _advance(
    graph: GraphSpec,
    checkpoint: Checkpoint,
    states: dict[str, str],
    plan: Plan,
    doomed: set[str],
) -> None:
    done = checkpoint.completed
    completed_map = {n.name: n.name in done for n in graph.nodes}
    # A buffered node whose job finished early is still pending to the workflow.
    cel_states = {
        n.name: State.PENDING.value
        if n.kind in _BUFFERED and n.name not in done and states[n.name] == State.COMPLETED
        else states[n.name]
        for n in graph.nodes
    }
    inputs = _ConditionInputs(checkpoint, cel_states, completed_map)
    for node in graph.nodes:
        if node.name in doomed:
            continue
        if states[node.name] != State.PENDING or not all(d in done for d in node.deps):
            continue
        if node.kind in (NodeKind.TASK, NodeKind.CHILD_WORKFLOW):
            plan.promote.append(node.job_id)
        elif node.kind is NodeKind.CONDITION:
            _condition(node, checkpoint, inputs, plan)
        elif node.kind is NodeKind.TIMER and node.delay_ms is not None:
            anchor = max(done[d] for d in node.deps)
            # A deadline past the last storable instant could never be written (nor
            # reached): it is scheduled at that instant, which is as good as never.
            fire_at = min(anchor + node.delay_ms, LAST_INSTANT_MS)
            plan.schedule.append((node.job_id, fire_at))
            checkpoint.record("timer_scheduled", None, node=node.name, fire_at_ms=fire_at)
        # Signal nodes wait for an emission; absolute timers were enqueued scheduled.


class _ConditionInputs:
    """What a condition reads in one tick, and the results already known for it.

    A condition is a pure function of its four variables, so a result is remembered by
    the expression and a digest of those variables: a workflow waiting on conditions that
    stay false costs one evaluation each per change of state, not one per poll."""

    def __init__(
        self, checkpoint: Checkpoint, states: dict[str, str], completed: dict[str, bool]
    ) -> None:
        self.revision, self.generation = checkpoint.revision, checkpoint.generation
        self.states, self.completed = states, completed
        self._digest: bytes | None = None

    def decide(self, expression: str) -> bool:
        if self._digest is None:
            seen = (self.revision, self.generation, sorted(self.states.items()))
            data = repr((seen, sorted(self.completed.items()))).encode()
            self._digest = hashlib.sha256(data).digest()
        key = (expression, self._digest)
        result = _DECIDED.get(key)
        if result is None:
            compiled = cel.compile(expression)
            result = cel.evaluate(
                compiled, self.revision, self.generation, self.states, self.completed
            )
            with _DECIDED_LOCK:  # the worker's threads share it
                if len(_DECIDED) >= _DECIDED_MAX:
                    _DECIDED.pop(next(iter(_DECIDED)))
                _DECIDED[key] = result
        return result


#: Condition results by (expression, digest of its inputs); bounded, oldest out first.
_DECIDED: dict[tuple[str, bytes], bool] = {}
_DECIDED_MAX = 8192
_DECIDED_LOCK = threading.Lock()


def _condition(
    node: NodeSpec, checkpoint: Checkpoint, inputs: _ConditionInputs, plan: Plan
) -> None:
    try:
        result = inputs.decide(node.condition or "")
    except ConditionEvaluationError as exc:
        plan.fail.append((node.job_id, str(exc)))
        checkpoint.record("condition_failed", None, node=node.name, reason=str(exc))
        return
    if result:
        plan.promote.append(node.job_id)

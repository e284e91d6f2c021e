"""Batch handlers: one call for up to ``batch_size`` jobs of a kind, one outcome per job.

Threads: the claim loop hands each claimed job of a batch kind to the :class:`Collector`
instead of the buffer; the collector puts a group into the buffer once it holds
``batch_size`` jobs, and the heartbeat flushes groups whose ``batch_window`` has passed.
A handler thread runs a group with :func:`run_batch` and writes each member's outcome as
if it had run alone: its own fence, its own retry or completion, its own lost lease.

The handler returns ``None`` (every member succeeded with no result) or a mapping from job
id to that member's result; a value that is an exception (``Skip``, ``Snooze`` and
``RetryAfter`` included) is that member's outcome. Raising fails (or snoozes, or skips)
every member. Decoding is per member: an undecodable payload is that member's outcome and
the handler never sees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from headgate_django import tracing
from headgate_django.context import JobContext
from headgate_django.registry import TaskDef
from headgate_django.store.vendor import connection_for
from headgate_django.worker import execute

E = TypeVar("E")


@dataclass(frozen=True)
class BatchMember:
    """One job of a batch: its context (fence, ``log``, ``set_progress``…) and arguments."""

    ctx: JobContext
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return self.ctx.job_id


def run_batch(
    definition: TaskDef, attempts: list[tuple[JobContext, bytes, int]]
) -> list[execute.Outcome]:
    """Run one call of ``definition`` for ``(ctx, payload, schema_version)`` attempts;
    return their outcomes in the same order (each member in its span, with tracing on).
    Writes nothing."""
    if not (tracing.ENABLED and tracing.active()):
        return call_batch(definition, attempts)
    with tracing.batch_spans([ctx for ctx, _, _ in attempts]) as report:
        outcomes = call_batch(definition, attempts)
        report([execute.label(o) for o in outcomes])
    return outcomes


def call_batch(
    definition: TaskDef, attempts: list[tuple[JobContext, bytes, int]]
) -> list[execute.Outcome]:
    """:func:`run_batch` without spans (a batch of one is already in its attempt's)."""
    outcomes: dict[str, execute.Outcome] = {}
    members = []
    for ctx, payload, version in attempts:
        try:
            args, kwargs = execute.decode(definition, payload, version)
        except (ValueError, UnicodeDecodeError) as exc:
            outcomes[ctx.job_id] = execute.Undecodable(reason=str(exc))
            continue
        members.append(BatchMember(ctx, tuple(args), kwargs))
    if members:
        outcomes.update(_call(definition, members))
    return [execute.with_logs(ctx, outcomes[ctx.job_id]) for ctx, _, _ in attempts]


def _call(definition: TaskDef, members: list[BatchMember]) -> dict[str, execute.Outcome]:
    try:
        returned = definition.fn(members)
    except BaseException as exc:  # the whole batch: one outcome for every member
        outcome = execute.outcome_of(exc)
        return {m.job_id: _unless_lost(m, outcome) for m in members}
    if returned is None:
        return {m.job_id: _unless_lost(m, execute.Succeeded(None)) for m in members}
    ids = {m.job_id for m in members}
    if not isinstance(returned, Mapping) or not set(returned) <= ids:
        wrong = execute.failure(
            TypeError(
                "a batch handler returns None or a mapping of its members' job ids to "
                f"results; got {type(returned).__name__}"
                + (
                    f" with unknown ids {sorted(set(returned) - ids)[:5]}"
                    if isinstance(returned, Mapping)
                    else ""
                )
            )
        )
        return {m.job_id: wrong for m in members}
    return {
        m.job_id: _unless_lost(m, _member_outcome(returned.get(m.job_id), m.ctx.using))
        for m in members
    }


def _member_outcome(value: Any, using: str) -> execute.Outcome:
    if isinstance(value, BaseException):
        return execute.outcome_of(value)
    if value is None:
        return execute.Succeeded(None)
    return execute.result_outcome(value, connection_for(using))


def _unless_lost(member: BatchMember, outcome: execute.Outcome) -> execute.Outcome:
    """A member whose lease was lost while the batch ran: its outcome is not written."""
    if member.ctx.cancelled and not isinstance(outcome, execute.LeaseLost):
        return execute.LeaseLost(reason="the attempt was cancelled while it ran")
    return outcome


class Collector(Generic[E]):
    """Groups held jobs of batch kinds until a group is full or its window has passed."""

    def __init__(self, put: Callable[[list[E]], None]) -> None:
        self._put = put
        self._lock = threading.Lock()
        self._open: dict[str, tuple[float, TaskDef, list[E]]] = {}  # kind → (since, def, jobs)

    def add(self, definition: TaskDef, entry: E) -> None:
        size = definition.batch_size or 1
        with self._lock:
            _, _, group = self._open.setdefault(definition.kind, (time.monotonic(), definition, []))
            group.append(entry)
            full = len(group) >= size
            if full:
                del self._open[definition.kind]
        if full:
            self._put(group)

    def flush(self, *, now: float | None = None) -> None:
        """Put every group whose window has passed (every group, without ``now``)."""
        with self._lock:
            due = [
                kind
                for kind, (since, definition, _) in self._open.items()
                if now is None or now - since >= definition.batch_window.total_seconds()
            ]
            groups = [self._open.pop(kind)[2] for kind in due]
        for group in groups:
            self._put(group)

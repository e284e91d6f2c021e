"""Eager Operations: a pass that parks on one Operation it has just scheduled runs it on its
own thread, then replays again at once, instead of sending both through the queue.

Without it, each sequential Operation costs two job cycles: the Operation job (claim, run,
ack that records the outcome and wakes the task) and the next workflow-task pass (claim,
read, replay, commit, snooze). With it, the pass's commit leases the Operation job to this
worker in the same transaction that enqueues it, this thread runs it, and the workflow
task — still held by this thread — replays with the outcome at once (Temporal calls this
eager dispatch). A success is recorded in the transaction of that next pass (the job
completed, fenced, the header locked while the pass replays, the outcome appended before
the pass's own events: ``workflow_task._fold``), so a sequential Operation costs one
transaction; any other outcome is recorded by the same fenced writes any worker uses.

Nothing about the guarantees changes: the Operation job is an ordinary leased job (the
worker renews it with its other leases; after a crash it is reclaimed and retried with the
same ``ctx.execution_key``), the task's lease still fences every pass, and only this thread
replays the execution meanwhile. It is only taken when it cannot delay anything else:

- the pass blocks on exactly that Operation (``.result()``; a ``select`` also waits for
  signals or timers, which must not wait behind the Operation);
- this worker has the Operation's code and would claim its job (kind and queue; a paused
  queue, or one with an admission policy such as a concurrency ceiling, is honoured by the
  lease itself, which then leaves the job to a claim);
- the worker is not draining, and this workflow task has kept its thread for less than
  ``EAGER_BUDGET``, so one long execution cannot hold a handler thread for ever.

Otherwise the Operation job is enqueued and claimed as usual.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta

from headgate_django import metrics, tracing
from headgate_django.context import JobContext
from headgate_django.durable.registry import find_operation
from headgate_django.envelope import Envelope
from headgate_django.exceptions import LeaseLostError
from headgate_django.kernel.replay_events import Parked, ScheduleOperation
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.durable_jobs import OP_KIND, EagerLease
from headgate_django.worker import execute
from headgate_django.worker.settle import settle

#: How long one claim of a workflow task may keep running Operations on its thread.
EAGER_BUDGET = timedelta(seconds=5)
#: Outcomes of an Operation attempt whose fact is in history now: replay again at once.
FINISHED = frozenset({"completed", "archived", "skipped", "undecodable"})


def spent(since: float) -> bool:
    """Whether the claim of the workflow task that started at ``since`` (monotonic) has
    used up ``EAGER_BUDGET``: it must then give its handler thread back."""
    return time.monotonic() - since > EAGER_BUDGET.total_seconds()


def eager_lease(
    ctx: JobContext,
    outcome: Parked,
    commands: Sequence[ScheduleOperation],
    operations: Sequence[Envelope],
    *,
    since: float,
) -> EagerLease | None:
    """The Operation job this pass should lease to its own worker, if any (see above).
    ``operations`` are the jobs of ``commands``, in order; ``since`` is when this claim of
    the workflow task started (``time.monotonic()``)."""
    host = ctx.host
    if host is None or host.stopping or len(outcome.waiting_on) != 1:
        return None
    if spent(since):
        return None
    (waiting,) = outcome.waiting_on
    for command, envelope in zip(commands, operations, strict=True):
        if command.command_id != waiting:
            continue
        if find_operation(command.name, command.version) is None:
            return None
        if not host.serves(OP_KIND, envelope.queue):
            return None
        assert envelope.id is not None  # an Operation job's id is its execution key
        return EagerLease(envelope.id, host.worker_id, host.lease_ttl)
    return None  # it waits on an Operation an earlier pass scheduled


@contextlib.contextmanager
def adopted(ctx: JobContext, job: ClaimedJob) -> Iterator[JobContext]:
    """The context of the Operation job leased to this worker, its lease renewed with the
    worker's own until its outcome is recorded."""
    host = ctx.host
    assert host is not None  # only a pass run by a worker leases eagerly
    op_ctx = JobContext(job, worker_id=ctx.worker_id)
    if tracing.ENABLED:  # its span nests in the pass's, as its stored context says
        op_ctx.trace_parent = tracing.carrier()
    host.adopt(job.ref, op_ctx)
    try:
        yield op_ctx
    finally:
        host.disown(job.ref)


def attempt(op_ctx: JobContext, job: ClaimedJob) -> execute.Outcome:
    """Run one attempt of the Operation here, exactly as a worker's handler thread would."""
    started = time.monotonic()
    outcome = execute.run_attempt(op_ctx, job.payload, job.schema_version, None)
    metrics.observe_attempt(job.queue, job.kind, execute.label(outcome), time.monotonic() - started)
    return outcome


def record(job: ClaimedJob, outcome: execute.Outcome) -> str:
    """Record the outcome as any worker does; return its label (see ``settle``)."""
    try:
        return settle(job, outcome)
    except LeaseLostError:
        return "lost"

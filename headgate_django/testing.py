"""Helpers for testing your own tasks and workflows without starting workers.

They run jobs in the test's own thread, through the same claim, fence and settle code the
worker uses, so what passes here behaves the same under ``runworkers``::

    from headgate_django import testing

    def test_welcome_email(db):
        send_welcome.enqueue(user_id=1)
        report = testing.run_jobs()
        assert report.completed == 1
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from headgate_django import store, tracing
from headgate_django.context import JobContext
from headgate_django.models import Job
from headgate_django.registry import registered_kinds
from headgate_django.store.maintenance import job_make_due
from headgate_django.store.reads import job_list
from headgate_django.store.tracing import job_trace_contexts
from headgate_django.worker import execute
from headgate_django.worker.settle import settle

_WORKER_ID = "headgate-testing"


@dataclass
class RunReport:
    """What :func:`run_jobs` did: a label per job run, in order."""

    outcomes: list[tuple[str, str]] = field(default_factory=list)  # (job id, label)

    @property
    def counts(self) -> Counter[str]:
        return Counter(label for _, label in self.outcomes)

    def __getattr__(self, label: str) -> int:
        if label.startswith("_"):
            raise AttributeError(label)
        return self.counts[label]


def run_one(
    *, queues: Sequence[str] | None = None, using: str = "default"
) -> tuple[str, str] | None:
    """Claim and run exactly one available job; return ``(job_id, label)`` or ``None``."""
    claimed = store.job_claim(
        worker_id=_WORKER_ID,
        limit=1,
        lease_ttl=timedelta(minutes=5),
        queues=queues,
        kinds=registered_kinds(),
        using=using,
    )
    if not claimed:
        return None
    job = claimed[0]
    ctx = JobContext(job, worker_id=_WORKER_ID, using=using)
    if tracing.ENABLED and tracing.active():
        ctx.trace_parent = job_trace_contexts([job.ref.job_id], using=using).get(job.ref.job_id)
    outcome = execute.run_attempt(ctx, job.payload, job.schema_version, None)
    return job.ref.job_id, settle(job, outcome, using=using)


def run_jobs(
    *,
    queues: Sequence[str] | None = None,
    include_scheduled: bool = False,
    max_jobs: int = 10_000,
    using: str = "default",
) -> RunReport:
    """Run available jobs until none is left (or ``max_jobs`` ran).

    With ``include_scheduled=True``, scheduled, snoozed and backing-off jobs are treated
    as due, so retries and timers run too. It stops when a round of due jobs only snoozed
    (everything left waits for something external, like a workflow signal); a job that
    keeps failing stops at its ``max_attempts``.
    """
    report = RunReport()
    while len(report.outcomes) < max_jobs:
        round_labels: list[str] = []
        while len(report.outcomes) < max_jobs:
            store.job_promote_due(using=using)
            ran = run_one(queues=queues, using=using)
            if ran is None:
                break
            report.outcomes.append(ran)
            round_labels.append(ran[1])
        # Stop when nothing is left to make due, or when a whole round only snoozed: what
        # remains waits for something outside (a signal, a real deadline), not for time.
        if not include_scheduled or (round_labels and set(round_labels) == {"snoozed"}):
            break
        if not job_make_due(queues=queues, using=using):
            break
    return report


def enqueued(kind: str | None = None, *, queue: str | None = None, **filters: Any) -> list[Job]:
    """Jobs in the store, oldest first, optionally filtered (``state=…``, ``workflow_id=…``)."""
    return job_list(kind=kind, queue=queue, **filters)


def assert_enqueued(kind: str, count: int | None = None, **filters: Any) -> list[Job]:
    """Assert that jobs of ``kind`` were enqueued (exactly ``count`` of them if given)."""
    jobs = enqueued(kind, **filters)
    if count is None and not jobs:
        raise AssertionError(f"no {kind} job was enqueued")
    if count is not None and len(jobs) != count:
        raise AssertionError(f"expected {count} {kind} job(s), found {len(jobs)}")
    return jobs

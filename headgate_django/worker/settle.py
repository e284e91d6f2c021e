"""Write the outcome of one attempt through the store. Shared by the runner and
``headgate_django.testing`` so tests exercise the same path production does."""

from __future__ import annotations

import logging
from datetime import timedelta

from headgate_django import store
from headgate_django.kernel.states import State
from headgate_django.kernel.storable import storable_text
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.fenced import MAX_ERROR_CHARS, Completion
from headgate_django.worker import events, execute

log = logging.getLogger("headgate_django.worker")


_NO_RETENTION = timedelta(0)


def completion(job: ClaimedJob, outcome: execute.Succeeded) -> Completion:
    return Completion(
        job.ref,
        outcome.result,
        delete=job.retention <= _NO_RETENTION,
        workflow_id=job.workflow_id,
        logs=outcome.logs,
    )


def completion_of(job: ClaimedJob) -> Completion:
    """The job's completion without a result (what ``ctx.once(..., last=True)`` commits)."""
    return completion(job, execute.Succeeded(result=None))


def settle(job: ClaimedJob, outcome: execute.Outcome, *, using: str = "default") -> str:
    """Record ``outcome``; return a label: completed, retried, archived, snoozed, skipped,
    revoked, undecodable or lost. Raises ``LeaseLostError`` when the lease is gone.

    Once the write is committed, the outcome's signals are sent (:mod:`.events`)."""
    label = _record(job, outcome, using=using)
    events.settled(job, outcome, label)
    return label


def _record(job: ClaimedJob, outcome: execute.Outcome, *, using: str) -> str:
    ref = job.ref
    if isinstance(outcome, execute.Committed):
        return "completed"  # ctx.once(..., last=True) completed it with its effect
    if isinstance(outcome, execute.Succeeded):
        done = store.job_complete_many([completion(job, outcome)], using=using)
        return "completed" if done else "lost"
    if isinstance(outcome, execute.Failed):
        state = store.job_retry(
            ref,
            error=outcome.error,
            traceback=outcome.traceback,
            delay=outcome.delay,
            exception=outcome.exception,
            logs=outcome.logs,
            using=using,
        )
        if state is State.ARCHIVED:
            log.error(
                "job %s (%s) archived after its last attempt: %s",
                ref.job_id,
                job.kind,
                _cut(outcome.error),
            )
            return "archived"
        log.warning("job %s (%s) failed, will retry: %s", ref.job_id, job.kind, _cut(outcome.error))
        return "retried"
    if isinstance(outcome, execute.Snoozed):
        store.job_snooze(ref, delay=outcome.delay, using=using)
        return "snoozed"
    if isinstance(outcome, execute.Skipped):
        store.job_skip(ref, reason=outcome.reason, logs=outcome.logs, using=using)
        return "skipped"
    if isinstance(outcome, execute.Revoked):
        if store.job_revoke(ref, reason=outcome.reason, using=using) is State.DELETED:
            return "revoked"
        return "skipped"
    if isinstance(outcome, execute.Undecodable):
        store.job_mark_undecodable(
            ref,
            reason=outcome.reason,
            traceback=outcome.traceback,
            logs=outcome.logs,
            using=using,
        )
        log.error("job %s (%s) is undecodable: %s", ref.job_id, job.kind, _cut(outcome.reason))
        return "undecodable"
    return "lost"


def _cut(message: str) -> str:
    """An error message as the store keeps it, marked when cut: a handler that raises with
    a 100 KB message must not write 100 KB log lines on every attempt (nor one a log
    handler cannot encode)."""
    if len(message) <= MAX_ERROR_CHARS:
        return storable_text(message)
    return storable_text(message[:MAX_ERROR_CHARS]) + "…"

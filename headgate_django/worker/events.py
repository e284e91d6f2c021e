"""Send :mod:`headgate_django.signals` for outcomes the store has committed.

Called after each write returns (the acker's batch of successes, or ``settle`` for any
other outcome), never inside its transaction: a receiver sees only what is committed, and
whatever it does or raises cannot undo the outcome. With no receiver connected to any job
signal this returns before building anything, so plain jobs pay one attribute read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.dispatch import Signal

from headgate_django.kernel.names import COORDINATOR_KIND
from headgate_django.kernel.states import State
from headgate_django.registry import find_task
from headgate_django.signals import (
    job_archived,
    job_failed,
    job_finished,
    job_retried,
    workflow_finished,
)
from headgate_django.store.claim import ClaimedJob
from headgate_django.worker import execute

log = logging.getLogger("headgate_django.worker")


def listened() -> bool:
    """Whether any job or workflow signal has a receiver (dead ones included: cheap)."""
    return bool(
        job_finished.receivers
        or job_retried.receivers
        or job_failed.receivers
        or job_archived.receivers
        or workflow_finished.receivers
    )


def completed(jobs: Iterable[tuple[ClaimedJob, Any]]) -> None:
    """``job_finished`` (and ``workflow_finished``) for ``(job, result)`` pairs that landed."""
    if not (job_finished.receivers or workflow_finished.receivers):
        return
    for job, result in jobs:
        _send(job_finished, job, State.COMPLETED, result=result)
        if job.kind == COORDINATOR_KIND:
            _workflow(job, "succeeded", None)


def settled(job: ClaimedJob, outcome: execute.Outcome, label: str) -> None:
    """The signals of an outcome ``settle`` recorded under ``label``."""
    if not listened():
        return
    if label == "completed" and isinstance(outcome, execute.Succeeded | execute.Committed):
        completed([(job, outcome.result)])
    elif label in ("retried", "archived") and isinstance(outcome, execute.Failed):
        failed(job, error=outcome.error, retried=label == "retried")
    elif label == "skipped" and isinstance(outcome, execute.Skipped | execute.Revoked):
        _send(job_archived, job, State.ARCHIVED, reason="skipped", error=outcome.reason)
        if job.kind == COORDINATOR_KIND:
            _workflow(job, "failed", outcome.reason)
    elif label == "undecodable" and isinstance(outcome, execute.Undecodable):
        _send(job_failed, job, State.UNDECODABLE, error=outcome.reason)


def failed(job: ClaimedJob, *, error: str, retried: bool) -> None:
    """A recorded failed attempt: ``job_retried``, or ``job_failed`` then ``job_archived``."""
    if not listened():
        return
    if retried:
        _send(job_retried, job, State.RETRYABLE, error=error)
        return
    _send(job_failed, job, State.ARCHIVED, error=error)
    _send(job_archived, job, State.ARCHIVED, reason="attempts_exhausted", error=error)
    if job.kind == COORDINATOR_KIND:
        _workflow(job, "failed", error)


def _send(signal: Signal, job: ClaimedJob, state: State, **extra: Any) -> None:
    if not signal.receivers:
        return
    _robust(
        signal,
        find_task(job.kind),
        job_id=job.ref.job_id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempt + job.crash_attempt + 1,  # as ctx.attempt counts
        workflow_id=job.workflow_id,
        state=state.value,
        **extra,
    )


def _workflow(job: ClaimedJob, outcome: str, reason: str | None) -> None:
    if workflow_finished.receivers and job.workflow_id:
        _robust(
            workflow_finished,
            None,
            workflow_id=job.workflow_id,
            outcome=outcome,
            reason=reason,
            job_id=job.ref.job_id,
        )


def _robust(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send through ``send_robust`` and log, on the worker's logger, what a receiver raised
    (Django logs it too, on ``django.dispatch``, which projects often leave unrouted).
    Anything beyond an ``Exception`` (a receiver's ``SystemExit``) is caught here too, so the
    sending thread (the acker) lives on."""
    try:
        responses = signal.send_robust(sender, **kwargs)
    except BaseException:
        log.exception("a receiver of a headgate signal failed")
        return
    for fn, response in responses:
        if isinstance(response, Exception):
            log.error(
                "receiver %s of a headgate signal raised for job %s: %r",
                getattr(fn, "__qualname__", fn),
                kwargs.get("job_id"),
                response,
                exc_info=response,
            )

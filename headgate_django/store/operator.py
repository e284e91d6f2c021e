"""Operator verbs: what a person (or the API) does to a job by hand.

Each locks the row, asks the kernel's state table whether the move is allowed, and writes
the new state; a running handler learns about a cancel at its next fenced write or renewal.

The generic verbs refuse a job of an internal kind (``headgate:…``): its owner — the
workflow coordinator or the durable runtime — keeps rules these verbs know nothing of (an
uncertain Operation waits for an operator's decision, a signal node completes only on an
emission, a receipt is settled by its coordinator), so each refusal names the owner's verb.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet

from headgate_django.envelope import check_not_too_long, fingerprint
from headgate_django.exceptions import (
    DefinitionError,
    DuplicateError,
    InvalidTransitionError,
    NotFoundError,
)
from headgate_django.kernel import names
from headgate_django.kernel.states import Event, State, check
from headgate_django.models import LIVE_JOB_STATES, Job, Quarantine, QueueState
from headgate_django.store import vendor as v
from headgate_django.store.effect_records import effects_delete_gone
from headgate_django.store.fenced import after_finish
from headgate_django.store.insert import seal_payload
from headgate_django.store.rows import prep
from headgate_django.store.unique_keys import live_holders

_WORKFLOW_VERBS = (
    "its workflow's verbs: cancel_workflow (POST /api/v1/workflows/{id}/cancel) or "
    "request_failed_subgraph_retry (POST /api/v1/workflows/{id}/retry)"
)
#: The verbs that own each internal kind, named in the refusal of a generic verb.
_OWNER_VERBS = {
    names.COORDINATOR_KIND: _WORKFLOW_VERBS,
    names.TIMER_KIND: _WORKFLOW_VERBS,
    names.CONDITION_KIND: _WORKFLOW_VERBS,
    names.CHILD_KIND: _WORKFLOW_VERBS + ", on the parent or the child workflow",
    names.SIGNAL_KIND: "emit_signal (POST /api/v1/workflows/{id}/signals) or " + _WORKFLOW_VERBS,
    names.GRAFT_KIND: "its coordinator settles it; see workflow_events, or " + _WORKFLOW_VERBS,
    names.RETRY_KIND: "its coordinator settles it; see workflow_events, or " + _WORKFLOW_VERBS,
    names.DURABLE_TASK_KIND: (
        "durable.Manager().cancel / suspend / resume "
        "(POST /api/v1/durable/executions/{id}/cancel, /suspend, /resume)"
    ),
    names.DURABLE_OP_KIND: (
        "durable.Manager().resolve_uncertain for an uncertain Operation "
        "(POST /api/v1/durable/executions/{id}/resolve-uncertain), or "
        "durable.Manager().cancel for its execution"
    ),
}


def _locked(job_id: str, using: str, verb: str) -> Job:
    """The job, row-locked. ``verb`` names the generic verb asking, which an internal job
    refuses (``InternalKindError``); an owner's own call passes ``""``."""
    try:
        job = Job.objects.using(using).select_for_update().get(pk=job_id)
    except Job.DoesNotExist:
        raise NotFoundError(f"job {job_id} does not exist", id=job_id) from None
    if verb and names.is_internal_kind(job.kind):
        owner = _OWNER_VERBS.get(job.kind, "the verbs of the feature that made it")
        owner = owner.format(id=(job.workflow_id or "").removeprefix(names.DURABLE_GROUP_PREFIX))
        why = f"{verb} refuses job {job_id}; use {owner}"
        raise names.internal_kind_error(job.kind, why, id=job_id, verb=verb)
    return job


def _set(job_id: str, using: str, sql: str, params: list[Any]) -> None:
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        cursor.execute(f"UPDATE headgate_job SET {sql} WHERE id = %s", [*params, job_id])


def _refuse_taken_keys(jobs: QuerySet[Job], using: str) -> None:
    """Finished jobs do not hold their unique key, so another job may have taken it since;
    bringing them back to life must say so instead of failing on the unique index."""
    keys = [k for k in jobs.values_list("unique_key", flat=True) if k is not None]
    holders = live_holders(v.connection_for(using), keys)
    if holders:
        holder_id, key = holders[0]
        raise DuplicateError(
            f"a live job ({holder_id}) now holds unique key {key!r}", existing_id=holder_id
        )


def _revive(jobs: QuerySet[Job], using: str, sql: str, params: list[Any]) -> int:
    """Run the ``UPDATE`` that makes ``jobs`` live again; return its row count.

    :func:`_refuse_taken_keys` runs first, but an enqueue of one of their keys that had not
    committed then still wins the unique index: the update fails on it, in a savepoint, and
    the same check, made again now that the enqueue committed, names the holder. Without
    it the caller got a raw ``IntegrityError`` (an HTTP 500) for an ordinary conflict.
    """
    conn = v.connection_for(using)
    try:
        with transaction.atomic(using=using), conn.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)
    except IntegrityError:
        _refuse_taken_keys(jobs, using)
        raise


def job_operator_retry(job_id: str, *, using: str = "default") -> None:
    """Give an archived, cancelled or undecodable job a fresh set of attempts."""
    _retry(job_id, using=using, verb="retry")


def workflow_coordinator_reopen(job_id: str, *, using: str = "default") -> None:
    """Reopen a failed workflow's coordinator for its next generation: the operator retry
    that only ``request_failed_subgraph_retry`` may make, next to its retry receipt."""
    _retry(job_id, using=using, verb="")


def _retry(job_id: str, *, using: str, verb: str) -> None:
    with transaction.atomic(using=using):
        job = _locked(job_id, using, verb)
        check(job.state, Event.OPERATOR_RETRY)
        jobs = Job.objects.using(using).filter(pk=job_id)
        _refuse_taken_keys(jobs, using)
        conn = v.connection_for(using)
        _revive(
            jobs,
            using,
            f"UPDATE headgate_job SET state = %s, attempt = 0, crash_attempt = 0, "
            f"scheduled_at = {v.now(conn)}, finalized_at = NULL, expires_at = NULL WHERE id = %s",
            [State.AVAILABLE.value, job_id],
        )


def job_cancel(job_id: str, *, using: str = "default") -> bool:
    """Cancel a job that has not finished. Returns ``False`` if it already had."""
    with transaction.atomic(using=using):
        job = _locked(job_id, using, "cancel")
        if State(job.state) not in {
            State.PENDING,
            State.SCHEDULED,
            State.AVAILABLE,
            State.RETRYABLE,
            State.RUNNING,
        }:
            return False
        check(job.state, Event.OPERATOR_CANCEL)
        conn = v.connection_for(using)
        _set(
            job_id,
            using,
            f"state = %s, finalized_at = {v.now(conn)}, "
            f"expires_at = {v.plus_duration_column(conn, 'retention')}, "
            "lease_id = NULL, lease_expires_at = NULL",
            [State.CANCELLED.value],
        )
        with conn.cursor() as cursor:
            after_finish(cursor, conn, {job_id: job.workflow_id})
    return True


def job_promote(job_id: str, *, using: str = "default") -> None:
    """Make a pending (or scheduled, or backing-off) job available now."""
    with transaction.atomic(using=using):
        job = _locked(job_id, using, "promote")
        check(job.state, Event.OPERATOR_PROMOTE)
        conn = v.connection_for(using)
        _set(job_id, using, f"state = %s, scheduled_at = {v.now(conn)}", [State.AVAILABLE.value])


def job_reschedule(
    job_id: str,
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    using: str = "default",
) -> None:
    """Move a pending or scheduled job to run at ``at`` or after ``delay`` (store clock)."""
    if (at is None) == (delay is None):
        raise DefinitionError("reschedule needs exactly one of at= or delay=")
    if at is not None and at.tzinfo is None:
        raise DefinitionError("reschedule: at must be timezone-aware")
    check_not_too_long("reschedule: delay", delay)
    with transaction.atomic(using=using):
        job = _locked(job_id, using, "reschedule")
        check(job.state, Event.OPERATOR_SCHEDULE)
        conn = v.connection_for(using)
        if delay is not None:
            _set(
                job_id,
                using,
                f"state = %s, scheduled_at = {v.plus_ms(conn)}",
                [State.SCHEDULED.value, int(delay.total_seconds() * 1000)],
            )
        else:
            _set(
                job_id,
                using,
                "state = %s, scheduled_at = %s",
                [State.SCHEDULED.value, prep(conn, "scheduled_at", at)],
            )


def quarantine_release(fingerprint_hex: str, *, using: str = "default") -> int:
    """Lift a quarantine; its quarantined jobs become available. Returns how many."""
    with transaction.atomic(using=using):
        jobs = Job.objects.using(using).filter(
            fingerprint=fingerprint_hex, state=State.QUARANTINED.value
        )
        _refuse_taken_keys(jobs, using)
        deleted, _ = Quarantine.objects.using(using).filter(pk=fingerprint_hex).delete()
        if not deleted:
            raise NotFoundError(f"fingerprint {fingerprint_hex} is not quarantined")
        conn = v.connection_for(using)
        return _revive(
            jobs,
            using,
            f"UPDATE headgate_job SET state = %s, crash_attempt = 0, scheduled_at = {v.now(conn)}, "
            "finalized_at = NULL WHERE fingerprint = %s AND state = %s",
            [State.AVAILABLE.value, fingerprint_hex, State.QUARANTINED.value],
        )


def job_replace_payload(
    job_id: str, *, payload: bytes, schema_version: int | None = None, using: str = "default"
) -> None:
    """Repair a job's payload (typically an undecodable one) before retrying it."""
    if schema_version is not None and schema_version < 1:
        raise DefinitionError("schema_version must be at least 1")
    with transaction.atomic(using=using):
        job = _locked(job_id, using, "payload replacement")
        if State(job.state) in {State.RUNNING, State.COMPLETED}:
            raise InvalidTransitionError(f"cannot replace the payload of a {job.state} job")
        Job.objects.using(using).filter(pk=job_id).update(
            payload=seal_payload(job.kind, bytes(payload)),
            fingerprint=fingerprint(job.kind, bytes(payload)),
            schema_version=schema_version or F("schema_version"),
        )


def job_delete(job_id: str, *, using: str = "default") -> None:
    """Delete a job that is not running (cancel a running one first), with its effect
    records."""
    with transaction.atomic(using=using), v.connection_for(using).cursor() as cursor:
        job = _locked(job_id, using, "delete")
        if job.state == State.RUNNING.value:
            raise InvalidTransitionError(f"job {job_id} is running; cancel it first")
        job.delete()
        effects_delete_gone(cursor, [job_id])


def queue_set_paused(name: str, paused: bool, *, using: str = "default") -> None:
    QueueState.objects.using(using).update_or_create(name=name, defaults={"paused": paused})


def job_cancel_many(job_ids: list[str], *, using: str = "default") -> int:
    """Cancel every listed job that has not finished; return how many were cancelled.

    Running handlers learn at their next fenced write or renewal (their lease is cleared).
    The finish hooks run in the same commit, as for :func:`job_cancel`: a cancelled
    workflow node wakes its coordinator, a cancelled coordinator the links waiting for
    its workflow.
    """
    if not job_ids:
        return 0
    live = LIVE_JOB_STATES  # the unfinished states, all of which a cancel may finish
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        # Lock the rows to cancel first, so the hooks get exactly the jobs this call
        # finished (an UPDATE's RETURNING is not available on every backend).
        cursor.execute(
            f"SELECT id, workflow_id FROM headgate_job "
            f"WHERE id IN ({v.placeholders(len(job_ids))}) "
            f"AND state IN ({v.placeholders(len(live))}){v.for_update(conn)}",
            [*job_ids, *live],
        )
        finished = {job_id: workflow_id for job_id, workflow_id in cursor.fetchall()}
        if not finished:
            return 0
        ids = sorted(finished)
        cursor.execute(
            f"UPDATE {v.jobs_by_id(conn)} SET state = %s, finalized_at = {v.now(conn)}, "
            f"expires_at = {v.plus_duration_column(conn, 'retention')}, "
            f"lease_id = NULL, lease_expires_at = NULL WHERE id IN ({v.placeholders(len(ids))}) "
            f"AND state IN ({v.placeholders(len(live))})",
            [State.CANCELLED.value, *ids, *live],
        )
        cancelled = cursor.rowcount
        after_finish(cursor, conn, finished)
        return cancelled

"""Trace context stored with jobs (``headgate_django.tracing``): written in the enqueue's
transaction, read once per claimed batch. Only callers with OpenTelemetry installed (and a
current span) reach these verbs, so plain enqueues and claims never touch the column."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from headgate_django.envelope import Envelope
from headgate_django.models import Job
from headgate_django.store.insert import job_insert_many


def job_insert_traced(
    envelopes: Sequence[Envelope], carrier: dict[str, str], *, using: str = "default"
) -> list[str]:
    """:func:`job_insert_many`, then the trace context on the new jobs, in one
    transaction: no worker claims a job before it carries its context."""
    with transaction.atomic(using=using):
        ids = job_insert_many(envelopes, using=using)
        Job.objects.using(using).filter(pk__in=ids).update(trace_context=carrier)
    return ids


def job_trace_contexts(job_ids: Sequence[str], *, using: str = "default") -> dict[str, dict]:
    """The stored trace context of those of ``job_ids`` that have one."""
    if not job_ids:
        return {}
    rows = (
        Job.objects.using(using)
        .filter(pk__in=list(job_ids), trace_context__isnull=False)
        .values_list("id", "trace_context")
    )
    return {job_id: found for job_id, found in rows if found}

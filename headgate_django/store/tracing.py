"""Trace context stored with jobs (``headgate_django.tracing``): written in the enqueue's
transaction, read once per claimed batch. Only callers with OpenTelemetry installed (and a
current span) reach these verbs, so plain enqueues and claims never touch the column.

The jobs the library inserts for itself take the context current where they are made: a
durable execution's first pass the one of ``Client().start``'s caller, its Operations the
pass's attempt span, a graft's nodes the span that submitted it. That is what lets a
workflow's attempts nest into one trace (:func:`headgate_django.tracing.traced`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from django.db import transaction

from headgate_django import tracing
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


def batch_insert_traced(
    enqueue_with: Callable[..., Iterable[str]], *, using: str = "default"
) -> list[str]:
    """A batch with rules of its own (a graft), then the current context on its jobs, in
    one transaction."""
    with transaction.atomic(using=using):
        ids = list(enqueue_with(using=using))
        job_trace_stamp(ids, using=using)
    return ids


def job_trace_stamp(job_ids: Sequence[str], *, using: str = "default") -> None:
    """Give the just-inserted ``job_ids`` the current span's context, if there is one.

    Call inside the inserting transaction, so no worker claims one before it has it.
    Without OpenTelemetry (or a tracer provider) this is one boolean test.
    """
    if not (tracing.ENABLED and job_ids and tracing.active()):
        return
    carrier = tracing.carrier()
    if carrier is not None:
        Job.objects.using(using).filter(pk__in=list(job_ids)).update(trace_context=carrier)

"""What the Django Tasks backend keeps beside a job's own columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from headgate_django.envelope import Envelope
from headgate_django.models import Job
from headgate_django.store.insert import job_insert_many
from headgate_django.store.reads import job_get
from headgate_django.store.tracing import job_trace_stamp


def job_insert_with_task_options(
    envelope: Envelope, options: dict[str, Any], *, using: str = "default"
) -> str:
    """Insert one Django task's job with what its ``using()`` set that no column keeps
    (``run_after``), so its ``TaskResult.task`` reads back as it was enqueued, and with the
    current span's trace context, as ``enqueue`` gives it; one transaction (the caller's,
    when there is one), so the job never exists without them."""
    with transaction.atomic(using=using):
        [job_id] = job_insert_many([envelope], using=using)
        Job.objects.using(using).filter(pk=job_id).update(task_options=options)
        job_trace_stamp([job_id], using=using)
    return job_id


def job_insert_and_read(insert: Callable[[], str], *, using: str = "default") -> Job | None:
    """Run ``insert`` (a store insert returning the new job's id) and read the job back in
    the same transaction: before it commits, so no worker elsewhere can have run the job
    (nor, with a retention of 0, deleted its row) between the two; the caller's
    transaction, when there is one."""
    with transaction.atomic(using=using):
        return job_get(insert(), using=using)

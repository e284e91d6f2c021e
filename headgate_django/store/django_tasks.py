"""What the Django Tasks backend keeps beside a job's own columns."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from headgate_django.envelope import Envelope
from headgate_django.models import Job
from headgate_django.store.insert import job_insert_many


def job_insert_with_task_options(
    envelope: Envelope, options: dict[str, Any], *, using: str = "default"
) -> str:
    """Insert one Django task's job with what its ``using()`` set that no column keeps
    (``run_after``), so its ``TaskResult.task`` reads back as it was enqueued; one
    transaction (the caller's, when there is one), so the job never exists without them."""
    with transaction.atomic(using=using):
        [job_id] = job_insert_many([envelope], using=using)
        Job.objects.using(using).filter(pk=job_id).update(task_options=options)
    return job_id

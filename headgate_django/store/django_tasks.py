"""What the Django Tasks backend keeps beside a job's own columns."""

from __future__ import annotations

from typing import Any

from headgate_django.exceptions import NotFoundError
from headgate_django.models import Job


def job_set_task_options(job_id: str, options: dict[str, Any], *, using: str = "default") -> None:
    """Record what a Django task's ``using()`` set for the job just enqueued (``run_after``),
    so its ``TaskResult.task`` reads back as it was enqueued. Called in the enqueue's own
    transaction, so the job never exists without them."""
    if not Job.objects.using(using).filter(pk=job_id).update(task_options=options):
        raise NotFoundError(f"job {job_id} not found", id=job_id)

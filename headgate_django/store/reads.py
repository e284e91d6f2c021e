"""Point reads of job rows for the layers above the store: by id, a bounded set of ids, or
(for the test helpers) a filter. They lock nothing and write nothing; the verbs that
change a job live beside them (``fenced``, ``operator``, ``workflows``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections

from headgate_django.models import Job

_CHUNK = 500


def job_get(job_id: str, *, using: str = "default") -> Job | None:
    """The job's row, or None when there is none."""
    return Job.objects.using(using).filter(pk=job_id).first()


def job_get_many(
    job_ids: Iterable[str], *, only: Sequence[str] | None = None, using: str = "default"
) -> dict[str, Job]:
    """The rows of these jobs by id (absent ids are absent), read in bounded chunks.

    ``only`` names the fields to read (the rest are deferred): a caller that looks at the
    state of many jobs must not load each one's payload, result, output and logs.
    """
    ids = list(job_ids)
    found: dict[str, Job] = {}
    qs = Job.objects.using(using)
    if only is not None:
        qs = qs.only(*only)
    for start in range(0, len(ids), _CHUNK):
        for job in qs.filter(pk__in=ids[start : start + _CHUNK]):
            found[job.id] = job
    return found


def job_state(job_id: str, *, using: str = "default") -> str | None:
    """Only the job's state (no payload read), or None when there is no such job."""
    return Job.objects.using(using).filter(pk=job_id).values_list("state", flat=True).first()


def job_list(
    *, kind: str | None = None, queue: str | None = None, using: str = "default", **filters: Any
) -> list[Job]:
    """Jobs oldest first, filtered by field lookups; :mod:`headgate_django.testing` uses it,
    so its reach is a test database, never a production queue scan."""
    qs = Job.objects.using(using).all()
    if kind is not None:
        qs = qs.filter(kind=kind)
    if queue is not None:
        qs = qs.filter(queue=queue)
    return list(qs.filter(**filters).order_by("enqueued_at", "id"))


def database_ping(*, using: str = "default") -> None:
    """One ``SELECT 1``: raises the driver's ``DatabaseError`` when the database is down."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()

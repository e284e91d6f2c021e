"""A job's output: bytes its handler replaces while it runs (``ctx.set_output``), fenced
like every worker write, and read back by an operator (``GET /api/v1/jobs/{id}/output``).

Output is user data (it needs the payload permission to read) and is never part of a list
of jobs: only the route that asks for it reads the column.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from headgate_django.exceptions import OutputTooLargeError
from headgate_django.models import Job
from headgate_django.store import vendor as v
from headgate_django.store.fenced import LeaseRef, _fenced_single
from headgate_django.store.rows import prep

#: The largest output a handler may set (bytes).
MAX_OUTPUT_BYTES = 1024 * 1024


class JobOutput(NamedTuple):
    output: bytes | None
    updated_at: datetime | None


def job_save_output(ref: LeaseRef, output: bytes, *, using: str = "default") -> None:
    """Replace the held job's output; ``OutputTooLargeError`` (nothing written) over
    :data:`MAX_OUTPUT_BYTES`, ``LeaseLostError`` when the lease is gone."""
    if len(output) > MAX_OUTPUT_BYTES:
        raise OutputTooLargeError(
            f"job {ref.job_id}: output of {len(output)} bytes is over {MAX_OUTPUT_BYTES}",
            size=len(output),
            limit=MAX_OUTPUT_BYTES,
        )
    conn = v.connection_for(using)
    _fenced_single(
        ref,
        f"output = %s, output_updated_at = {v.now(conn)}",
        [prep(conn, "output", output)],
        using,
    )


def job_output(job_id: str, *, using: str = "default") -> JobOutput | None:
    """The job's output and when it was last set; ``None`` when there is no such job."""
    row = (
        Job.objects.using(using)
        .filter(pk=job_id)
        .values_list("output", "output_updated_at")
        .first()
    )
    if row is None:
        return None
    output, updated_at = row
    return JobOutput(None if output is None else bytes(output), updated_at)

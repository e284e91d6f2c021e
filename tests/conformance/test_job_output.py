"""``ctx.set_output``: replace-style bytes, fenced, with a size limit; and the job's output
as ``GET /api/v1/jobs/{id}/output`` reads it (store verb ``job_output``)."""

from __future__ import annotations

import pytest

from headgate_django import store, task, testing
from headgate_django.context import JobContext
from headgate_django.exceptions import LeaseLostError, OutputTooLargeError
from headgate_django.models import Job
from headgate_django.store.output import MAX_OUTPUT_BYTES, job_output, job_save_output
from tests.conformance.helpers import LONG, WORKER

pytestmark = pytest.mark.django_db


@task(kind="test.output.write")
def write_output(ctx, parts, size: int = 0):
    for part in parts:
        ctx.set_output(part)
    if size:
        try:
            ctx.set_output(b"x" * size)
        except OutputTooLargeError as exc:
            return {"refused": exc.details}
    return None


def test_the_last_output_set_is_kept_and_text_is_utf8():
    job_id = write_output.enqueue(parts=["first", "zweite – ü"])
    assert testing.run_one() == (job_id, "completed")
    found = job_output(job_id)
    assert found.output == "zweite – ü".encode()
    assert found.updated_at is not None


def test_output_over_the_limit_is_refused_and_the_previous_one_stays():
    job_id = write_output.enqueue(parts=["kept"], size=MAX_OUTPUT_BYTES + 1)
    testing.run_one()
    assert Job.objects.get(pk=job_id).result == {
        "refused": {"size": MAX_OUTPUT_BYTES + 1, "limit": MAX_OUTPUT_BYTES}
    }
    assert job_output(job_id).output == b"kept"


def test_output_at_the_limit_is_accepted():
    job_id = write_output.enqueue(parts=[], size=MAX_OUTPUT_BYTES)
    testing.run_one()
    assert len(job_output(job_id).output) == MAX_OUTPUT_BYTES


def test_an_unset_output_and_an_unknown_job():
    job_id = write_output.enqueue(parts=[])
    assert job_output(job_id) == (None, None)
    assert job_output("no-such-job") is None


def test_a_stale_attempt_cannot_write_output():
    job_id = write_output.enqueue(parts=[])
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    store.job_release_many([claimed.ref])
    [again] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    assert again.ref.fence == claimed.ref.fence + 1
    with pytest.raises(LeaseLostError):
        job_save_output(claimed.ref, b"late")
    stale = JobContext(claimed, worker_id=WORKER)
    with pytest.raises(LeaseLostError):
        stale.set_output("late")
    assert stale.cancelled
    assert job_output(job_id).output is None
    job_save_output(again.ref, b"current")
    assert job_output(job_id).output == b"current"


@pytest.mark.parametrize("value", [None, 42, ["a"]])
def test_output_must_be_bytes_or_text(value):
    write_output.enqueue(parts=[])
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    with pytest.raises(TypeError, match="bytes or str"):
        JobContext(claimed, worker_id=WORKER).set_output(value)
    assert job_output(claimed.ref.job_id).output is None

"""A first pass through the store on the configured database."""

from __future__ import annotations

import pytest

from headgate_django import testing
from headgate_django.models import Job
from tests.app import tasks


@pytest.mark.django_db
def test_enqueue_run_complete():
    job_id = tasks.echo.enqueue(value=3)
    report = testing.run_jobs()
    assert report.outcomes == [(job_id, "completed")]
    job = Job.objects.get(pk=job_id)
    assert job.state == "completed"
    assert job.result == {"value": 3, "attempt": 1}
    assert job.finalized_at is not None and job.expires_at > job.finalized_at


@pytest.mark.django_db
def test_failure_retries_then_archives():
    job_id = tasks.always_fail.enqueue(message="nope")
    report = testing.run_jobs(include_scheduled=True)
    assert [label for _, label in report.outcomes] == ["retried", "retried", "archived"]
    job = Job.objects.get(pk=job_id)
    assert job.state == "archived"
    assert job.attempt == 3
    assert [e["error"] for e in job.errors] == ["RuntimeError: nope"] * 3
    assert "Traceback" in job.errors[0]["traceback"]

"""``POST /jobs`` with a deadline (instant or span); the detail shows it; bad ones are 400."""

from __future__ import annotations

import pytest

from headgate_django.models import Job
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def test_deadline_as_instant_or_span(operator: Api) -> None:
    at = operator.post("/api/v1/jobs", {"kind": "test.noop", "deadline": "2099-01-01T00:00:00Z"})
    assert at.status_code == 201, at.content
    shown = operator.get(f"/api/v1/jobs/{at.json()['id']}").json()
    assert shown["deadline"].startswith("2099-01-01")
    span = operator.post("/api/v1/jobs", {"kind": "test.noop", "deadline_ms": 60000})
    job = Job.objects.get(pk=span.json()["id"])
    assert job.deadline is not None and job.deadline > job.enqueued_at


@pytest.mark.parametrize(
    "extra",
    [{"deadline_ms": 0}, {"deadline": "2099-01-01T00:00:00Z", "deadline_ms": 5}, {"deadline": "x"}],
)
def test_bad_deadlines_are_400(operator: Api, extra: dict) -> None:
    assert operator.post("/api/v1/jobs", {"kind": "test.noop", **extra}).status_code == 400
    assert not Job.objects.exists()

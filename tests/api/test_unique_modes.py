"""``POST /jobs`` with a uniqueness mode: a replaced holder answers 200 with its id and
``replaced: true``; a new job 201 with ``replaced: false``; bad modes 400, nothing written."""

from __future__ import annotations

import pytest

from headgate_django.models import Job, UniqueWindow
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def test_replace_answers_200_with_the_holders_id(operator: Api) -> None:
    body = {"kind": "test.echo", "kwargs": {"value": 1}, "unique_key": "api-r"}
    created = operator.post("/api/v1/jobs", body)
    assert created.status_code == 201
    assert created.json() == {"id": created.json()["id"], "replaced": False}
    again = operator.post(
        "/api/v1/jobs",
        {**body, "kwargs": {"value": 2}, "priority": 4, "unique_replace": ["payload", "priority"]},
    )
    assert again.status_code == 200, again.content
    assert again.json() == {"id": created.json()["id"], "replaced": True}
    job = Job.objects.get(unique_key="api-r")
    assert job.priority == 4 and b'"value":2' in bytes(job.payload)


def test_debounce_and_throttle_over_http(operator: Api) -> None:
    debounce = {"kind": "test.noop", "unique_key": "api-d", "unique_debounce_ms": 60000}
    first = operator.post("/api/v1/jobs", debounce)
    assert first.status_code == 201
    assert Job.objects.get(pk=first.json()["id"]).state == "scheduled"
    assert operator.post("/api/v1/jobs", debounce).status_code == 200
    throttle = {"kind": "test.noop", "unique_key": "api-t", "unique_window_ms": 60000}
    assert operator.post("/api/v1/jobs", throttle).status_code == 201
    refused = operator.post("/api/v1/jobs", throttle)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "duplicate"


BAD = {
    "two-modes": {"unique_window_ms": 10, "unique_debounce_ms": 10, "unique_key": "k"},
    "no-key": {"unique_window_ms": 10},
    "unknown-field": {"unique_replace": ["queue"], "unique_key": "k"},
    "zero-window": {"unique_window_ms": 0, "unique_key": "k"},
    "empty-replace": {"unique_replace": [], "unique_key": "k"},
}


@pytest.mark.parametrize("extra", BAD.values(), ids=BAD.keys())
def test_bad_modes_are_400_and_write_nothing(operator: Api, extra: dict) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", **extra})
    assert response.status_code == 400, response.content
    assert not Job.objects.exists() and not UniqueWindow.objects.exists()

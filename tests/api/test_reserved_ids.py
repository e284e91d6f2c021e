"""The API refuses an id under ``sched:`` (reserved for schedules' ticks) with
``422 reserved_id`` in the error envelope, and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django.models import Execution, Job
from tests.api.conftest import Api
from tests.api.test_errors import envelope

pytestmark = pytest.mark.django_db


def test_post_jobs_refuses_a_reserved_job_id(operator: Api) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", "id": "sched:nightly:0"})
    error = envelope(response, 422, "reserved_id")
    assert error["detail"] == {"id": "sched:nightly:0"}
    assert "reserved" in error["message"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "field", [{"workflow_id": "sched:dur:0"}, {"business_idempotency_key": "sched:dur:0"}]
)
def test_durable_start_refuses_a_reserved_id(operator: Api, field: dict[str, Any]) -> None:
    body = {"name": "test-scheduled", "version": "1", "input": {"n": 1}, **field}
    envelope(operator.post("/api/v1/durable/executions", body), 422, "reserved_id")
    assert not Execution.objects.exists()


def test_a_graft_cannot_give_a_node_a_reserved_id(operator: Api, onboarding: str) -> None:
    before = Job.objects.count()
    body = {
        "expected_revision": 1,
        "tasks": [{"name": "x", "kind": "test.echo", "id": "sched:nightly:0", "deps": []}],
    }
    response = operator.post(f"/api/v1/workflows/{onboarding}/grafts", body)
    envelope(response, 422, "reserved_id")
    assert Job.objects.count() == before

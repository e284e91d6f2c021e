"""The schema and the validation agree: what the OpenAPI document allows is accepted, what
it does not is a 400 naming the offending parameter or field. Each case is one that a
schemathesis run against a live server found accepted although invalid (ST201) or
refused although valid (ST202)."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django.models import Job
from tests.api.conftest import Api
from tests.api.test_schema_docs import generate
from tests.conformance.helpers import enqueue_job

pytestmark = pytest.mark.django_db


def refused(response: Any, name: str) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert name in error["detail"], error


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs?limit=",
        "/api/v1/quarantine?limit=",
        "/api/v1/workflows?limit=",
        "/api/v1/durable/executions?limit=",
        "/api/v1/jobs?finalized_before=",
        "/api/v1/jobs?queue=",
        "/api/v1/jobs?state=",
        "/api/v1/jobs/counts?queue=",
        "/api/v1/durable/executions?name=",
        "/api/v1/workflows?cursor=",
    ],
)
def test_an_empty_parameter_is_refused_not_ignored(operator: Api, path: str) -> None:
    refused(operator.get(path), path.rsplit("?", 1)[1].split("=")[0])


@pytest.mark.parametrize(
    "query",
    [
        "limit=%2B5",  # int() takes "+5", " 5", "5_0" and non-ASCII digits; the schema does not
        "limit=5_0",
        "limit=%D9%A5",
        "finalized_before=2026-01-01",  # a date, not a date-time
        "finalized_before=2026-01-01T00:00:00",  # no offset
        "created_after=yesterday",
        "queue=a%07b",
        "state=AAA",
    ],
)
def test_values_the_schema_does_not_allow_are_refused(operator: Api, query: str) -> None:
    refused(operator.get(f"/api/v1/jobs?{query}"), query.split("=")[0])


@pytest.mark.parametrize(
    "query", ["state=AAA", "business_idempotency_key=a%01", "task_queue=%0A", "limit=0"]
)
def test_execution_filters_are_strict(operator: Api, query: str) -> None:
    refused(operator.get(f"/api/v1/durable/executions?{query}"), query.split("=")[0])


def test_include_payload_is_one_of_its_listed_spellings(operator: Api) -> None:
    job_id = enqueue_job()
    refused(operator.get(f"/api/v1/jobs/{job_id}?include_payload="), "include_payload")
    refused(operator.get(f"/api/v1/jobs/{job_id}?include_payload=TRUE"), "include_payload")
    assert operator.get(f"/api/v1/jobs/{job_id}?include_payload=false").status_code == 200


@pytest.mark.parametrize(
    "instant",
    [
        "1150-12-24T22:57:01.877436Z",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59-12:00",
        "2026-01-01T12:10:51.2912+20:37",  # beyond PostgreSQL's ±15:59 offsets
    ],
)
def test_any_rfc3339_instant_is_a_valid_bound(operator: Api, instant: str) -> None:
    """Every stored instant lies in 1970–9998, so a bound outside is clamped, not refused."""
    enqueue_job()
    before = operator.get("/api/v1/jobs", {"created_before": instant})
    after = operator.get("/api/v1/jobs", {"created_after": instant})
    assert before.status_code == after.status_code == 200, before.content
    assert len(before.json()["jobs"]) + len(after.json()["jobs"]) == 1


def test_signal_cursor_bounds_are_the_schemas(operator: Api, onboarding: str) -> None:
    (cursor,) = [
        p
        for p in generate()["paths"]["/api/v1/workflows/{workflow_id}/signals"]["get"]["parameters"]
        if p["name"] == "cursor"
    ]
    assert cursor["schema"]["minimum"] == 1
    refused(operator.get(f"/api/v1/workflows/{onboarding}/signals?cursor=0"), "cursor")
    assert operator.get(f"/api/v1/workflows/{onboarding}/signals?cursor=1").status_code == 200


def test_an_unknown_body_field_is_refused_and_writes_nothing(operator: Api) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", "priorty": 5})
    refused(response, "priorty")
    assert not Job.objects.exists()


def test_an_unknown_field_of_a_nested_body_is_refused(operator: Api, onboarding: str) -> None:
    body = {"expected_revision": 1, "tasks": [{"name": "x", "kind": "test.noop", "dep": []}]}
    response = operator.post(f"/api/v1/workflows/{onboarding}/grafts", body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["detail"] == {"tasks": {"0": {"dep": ["unknown field"]}}}


def test_exclusive_schedules_are_a_400(operator: Api) -> None:
    body = {"kind": "test.noop", "pending": True, "delay_ms": 5}
    assert operator.post("/api/v1/jobs", body).status_code == 400
    assert not Job.objects.exists()


def test_request_bodies_refuse_extra_fields_in_the_schema_too() -> None:
    schemas = generate()["components"]["schemas"]
    requests = {name: s for name, s in schemas.items() if name.endswith("Request")}
    assert requests
    for name, schema in requests.items():
        assert schema.get("additionalProperties") is False, name
    assert schemas["RescheduleRequest"]["oneOf"] == [
        {"required": ["scheduled_at"]},
        {"required": ["delay_ms"]},
    ]


def test_every_query_parameter_declares_its_type() -> None:
    for path, operations in generate()["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                if param["in"] == "query":
                    schema = param["schema"]
                    assert "type" in schema, (method, path, param["name"])
                    if schema["type"] == "string" and "format" not in schema:
                        assert "enum" in schema or "pattern" in schema, (path, param["name"])

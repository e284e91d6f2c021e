"""One envelope, ``{"error": {"code", "message", "detail"}}``, for every error status —
the API's own, DRF's, Django's, and a database that is down."""

from __future__ import annotations

import base64
import logging
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError
from django.test import override_settings
from rest_framework.throttling import UserRateThrottle

from headgate_django.kernel.states import State
from headgate_django.models import DURABLE_STATES, STATE_CHOICES, Job
from tests.api.conftest import Api, onboarding_workflow
from tests.conformance.helpers import enqueue_job, job_in_state, unique_payload

pytestmark = pytest.mark.django_db


def envelope(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "detail"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["code"] == code, body
    return body["error"]


def test_400_validation_names_the_fields(operator: Api) -> None:
    error = envelope(operator.post("/api/v1/jobs", {"priority": "high"}), 400, "invalid")
    assert set(error["detail"]) == {"kind", "priority"}


def test_400_malformed_json(operator: Api) -> None:
    response = operator.client.post(
        "/api/v1/jobs", "{", content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    envelope(response, 400, "parse_error")


def test_400_json_strings_with_nul(operator: Api) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "test.echo", "kwargs": {"v": "a\x00b"}})
    envelope(response, 400, "parse_error")


@pytest.mark.parametrize("query", ["limit=0", "limit=201", "limit=x", "cursor=zzzz", "state=nope"])
def test_400_bad_query_parameters(operator: Api, query: str) -> None:
    error = envelope(operator.get(f"/api/v1/jobs?{query}"), 400, "invalid_query_parameter")
    assert list(error["detail"]) == [query.split("=")[0]]


def test_400_too_many_query_parameters_not_logged_as_a_server_error(anon: Api, caplog: Any) -> None:
    # Django refuses more than DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) at the first read of
    # request.GET, before authentication: it was a 500 with a traceback per request.
    with caplog.at_level(logging.INFO):
        response = anon.get("/api/v1/jobs?" + "&".join(["x=1"] * 1001))
    envelope(response, 400, "too_many_fields")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/jobs", "kind=%20"),
        ("/api/v1/jobs", "workflow_id=%1f"),
        ("/api/v1/jobs", "queue=%09%20"),
        ("/api/v1/jobs", "q=%20"),
        ("/api/v1/quarantine", "kind=%20"),
    ],
)
def test_400_blank_filter_value_is_empty(operator: Api, path: str, query: str) -> None:
    # Stripped to nothing, it filtered nothing: the list answered with every row.
    enqueue_job()
    name = query.split("=")[0]
    error = envelope(operator.get(f"{path}?{query}"), 400, "invalid_query_parameter")
    assert error["detail"] == {name: [f"{name} must not be empty"]}


def test_400_filter_value_with_a_control_character_at_its_end(operator: Api) -> None:
    # The strip dropped it unchecked, and the jobs of kind test.noop were listed.
    enqueue_job()
    response = operator.get("/api/v1/jobs?kind=test.noop%1f")
    error = envelope(response, 400, "invalid_query_parameter")
    assert list(error["detail"]) == ["kind"] and "control characters" in error["message"]


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("/api/v1/jobs", "%00"),
        ("/api/v1/jobs", "AAAA"),  # base64 of NULs: DRF's decoder read it as the first page
        ("/api/v1/jobs", "cD0wMUFCQw=="),  # DRF's own token form ("p=01ABC")
        ("/api/v1/jobs", "jobs:"),
        ("/api/v1/jobs", "jobs:a%01b"),
        ("/api/v1/jobs", "quarantine:0123"),  # another collection's cursor
        ("/api/v1/quarantine", "jobs:01ABC"),
        ("/api/v1/quarantine", "quarantine:" + "f" * 256),
    ],
)
def test_400_malformed_cursor_names_the_parameter(operator: Api, path: str, cursor: str) -> None:
    enqueue_job()
    error = envelope(operator.get(f"{path}?cursor={cursor}"), 400, "invalid_query_parameter")
    assert list(error["detail"]) == ["cursor"] and "cursor" in error["message"]


def test_a_returned_cursor_is_accepted(operator: Api) -> None:
    first, second = enqueue_job(), enqueue_job()
    page = operator.get("/api/v1/jobs", {"limit": 1}).json()
    assert page["next_cursor"] == f"jobs:{max(first, second)}"
    (rest,) = operator.get("/api/v1/jobs", {"limit": 1, "cursor": page["next_cursor"]}).json()[
        "jobs"
    ]
    assert rest["id"] == min(first, second)


def test_400_bad_enum_filters_list_the_valid_choices(operator: Api) -> None:
    error = envelope(operator.get("/api/v1/jobs?state=failed"), 400, "invalid_query_parameter")
    for state in [value for value, _ in STATE_CHOICES]:
        assert state in error["message"] and state in error["detail"]["state"][0]
    assert "a job that failed for good is archived" in error["message"]
    error = envelope(
        operator.get("/api/v1/durable/executions?state=AAA"), 400, "invalid_query_parameter"
    )
    assert error["detail"] == {"state": [error["message"]]}
    for state in DURABLE_STATES:
        assert state in error["message"]


def test_401_without_credentials(anon: Api) -> None:
    response = anon.get("/api/v1/jobs")
    envelope(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("path", ["/api/v1/schema/", "/api/v1/schema/?format=yaml"])
def test_401_from_the_schema_is_json_too(anon: Api, path: str) -> None:
    envelope(anon.get(path), 401, "not_authenticated")


def test_401_with_a_bad_token(anon: Api) -> None:
    response = anon.get("/api/v1/jobs", HTTP_AUTHORIZATION="Token nope")
    envelope(response, 401, "authentication_failed")


def test_403_without_permission(viewer: Api) -> None:
    envelope(viewer.post("/api/v1/queues/a/pause"), 403, "permission_denied")


def test_404_unknown_object(operator: Api) -> None:
    error = envelope(operator.get("/api/v1/jobs/nope"), 404, "not_found")
    assert error["detail"] == {"id": "nope"}


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nope",
        "/api/v1/jobs/a/b/c",
        "/api/v1",
        "/api/v1/nope/",
        "/api/v1/jobs/%01",
        # A decoded newline: ``.`` in the catch-all did not match it (Django's HTML 404).
        "/api/v1/jobs/%0A",
        "/api/v1/jobs/a%0Ab/checkpoint",
        "/api/v1/%0A",
        "/api/v1%0A",
        "/api/v1/durable/executions/x%0A/history",
        "/api/v1/workflows/w/nodes/%0A/dependents",
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_404_unknown_route(anon: Api, path: str, method: str) -> None:
    envelope(anon.send(method, path, key=None), 404, "not_found")


def test_the_project_keeps_its_own_404_outside_the_api(anon: Api) -> None:
    response = anon.get("/elsewhere/%0A")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


def test_405_wrong_method_says_what_is_allowed(operator: Api) -> None:
    response = operator.send("PATCH", "/api/v1/jobs", {})
    envelope(response, 405, "method_not_allowed")
    assert set(response["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


def test_406_a_format_the_route_cannot_render_is_not_a_404(operator: Api) -> None:
    """``?format=`` overrides ``Accept``: a value no renderer has is the 406 an ``Accept``
    of it gets, not a 404 that says an existing job does not exist."""
    job_id = enqueue_job()
    assert operator.get(f"/api/v1/jobs/{job_id}?format=json").status_code == 200
    error = envelope(operator.get(f"/api/v1/jobs/{job_id}?format=xml"), 406, "not_acceptable")
    assert error["message"] == "format 'xml' is not one of: json"
    # The schema renders OpenAPI media types; its errors are JSON like every other's.
    schema = envelope(operator.get("/api/v1/schema/?format=xml"), 406, "not_acceptable")
    assert "'xml' is not one of" in schema["message"]
    assert envelope(operator.get("/api/v1/jobs", HTTP_ACCEPT="text/html"), 406, "not_acceptable")


def test_409_revision_conflict(operator: Api) -> None:
    onboarding_workflow()
    body = {"expected_revision": 7, "tasks": [{"name": "x", "kind": "test.noop"}]}
    error = envelope(
        operator.post("/api/v1/workflows/onboarding:42/grafts", body), 409, "revision_conflict"
    )
    assert error["detail"] == {"current_revision": 1}


def test_409_duplicate_unique_key(operator: Api) -> None:
    body = {"kind": "test.noop", "unique_key": "once"}
    first = operator.post("/api/v1/jobs", body)
    error = envelope(operator.post("/api/v1/jobs", body), 409, "duplicate")
    assert error["detail"]["existing_id"] == first.json()["id"]


def test_409_invalid_transition(operator: Api) -> None:
    job_id, _ = job_in_state(State.COMPLETED)
    envelope(operator.post(f"/api/v1/jobs/{job_id}/cancel"), 409, "invalid_transition")


def test_413_request_body_over_2_mib(operator: Api) -> None:
    body = {"kind": "test.echo", "kwargs": {"blob": "x" * (2 * 1024 * 1024)}}
    error = envelope(operator.post("/api/v1/jobs", body), 413, "request_too_large")
    assert error["detail"]["limit"] == 2 * 1024 * 1024


def test_413_payload_over_its_limit(operator: Api) -> None:
    payload = base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", "payload": payload})
    envelope(response, 413, "payload_too_large")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_415_body_that_is_not_json(operator: Api, content_type: str) -> None:
    response = operator.client.generic(
        "POST",
        "/api/v1/jobs",
        b'{"kind": "test.noop"}',
        content_type=content_type,
        HTTP_IDEMPOTENCY_KEY="k",
    )
    envelope(response, 415, "unsupported_media_type")


def test_422_invalid_definition(operator: Api) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", "queue": "no spaces"})
    envelope(response, 422, "invalid_definition")


@pytest.mark.parametrize("every", ["3000000d", "999999999d", "99999999999999999999s"])
def test_422_schedule_interval_over_the_maximum(operator: Api, every: str) -> None:
    # Such an interval overflowed datetime arithmetic: a 500.
    body = {"spec": f"@every {every}", "task": "test.noop", "paused": True}
    error = envelope(operator.put("/api/v1/schedules/far", body), 422, "invalid_schedule")
    assert "at most 18250d" in error["message"]


def test_423_quarantined_fingerprint(operator: Api) -> None:
    payload = unique_payload()
    job_in_state(State.QUARANTINED, payload=payload)
    body = {"kind": "test.noop", "payload": base64.b64encode(payload).decode()}
    error = envelope(operator.post("/api/v1/jobs", body), 423, "quarantined")
    assert error["detail"]["fingerprint"] == Job.objects.get(state="quarantined").fingerprint


class OnePerMinute(UserRateThrottle):
    rate = "1/min"


def test_429_throttled(operator: Api) -> None:
    throttling = {"DEFAULT_THROTTLE_CLASSES": ["tests.api.test_errors.OnePerMinute"]}
    with override_settings(REST_FRAMEWORK=throttling):
        from django.core.cache import cache

        cache.clear()
        assert operator.get("/api/v1/meta").status_code == 200
        response = operator.get("/api/v1/meta")
        cache.clear()
    envelope(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0


def test_500_unclassified(operator: Api, caplog: Any) -> None:
    with mock.patch("headgate_django.api.views.health.meta", side_effect=RuntimeError("boom")):
        response = operator.get("/api/v1/meta")
    error = envelope(response, 500, "internal_error")
    assert "boom" not in error["message"]  # internals are logged, not shown
    assert "boom" in caplog.text


def test_503_database_down(operator: Api) -> None:
    down = OperationalError("server closed the connection unexpectedly")
    with mock.patch("django.db.backends.utils.CursorWrapper.execute", side_effect=down):
        response = operator.get("/api/v1/jobs")
        ready = operator.get("/api/v1/readyz")
        alive = operator.get("/api/v1/healthz")
    envelope(response, 503, "database_unavailable")
    envelope(ready, 503, "database_unavailable")
    assert response["Retry-After"] == ready["Retry-After"] == "1"
    assert alive.status_code == 200 and alive.json() == {"status": "ok"}


def test_options_is_not_a_method_of_the_api(operator: Api) -> None:
    response = operator.client.options("/api/v1/jobs")
    envelope(response, 405, "method_not_allowed")
    assert "OPTIONS" not in response["Allow"]
    assert operator.client.head("/api/v1/jobs").status_code == 200

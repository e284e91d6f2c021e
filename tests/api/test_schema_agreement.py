"""Each rule the schema states for a request body is the rule the server enforces: a body
the schema allows is accepted, one it forbids is refused with the error envelope.

Each rule here was missing from the schema or the validation until a schemathesis run
against a live server (``make schemathesis``) reached the success paths: rejected
"valid" data (a reserved kind, a queue name outside the grammar, a durable name with an
outer space, a schedule without a target, a bulk action without its instant) and
accepted "invalid" data (``1`` for a string, ``0`` for ``false``, ``"1"`` for an integer).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import pytest
from drf_spectacular.renderers import OpenApiJsonRenderer

from headgate_django.durable.registry import check_name
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.names import OUTER_SPACE
from tests.api.conftest import Api
from tests.api.test_schema_docs import generate
from tests.conformance.helpers import enqueue_job

pytestmark = pytest.mark.django_db

SCHEMA = json.loads(OpenApiJsonRenderer().render(generate()))


def allows(component: str, body: dict[str, Any]) -> bool:
    """Whether the schema's request ``component`` allows ``body``."""
    document = {"$ref": f"#/components/schemas/{component}", **SCHEMA}
    return bool(jsonschema_rs.validator_for(document).is_valid(body))


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "detail"} and error["code"] == code, error
    return error


def test_an_internal_kind_is_forbidden_by_the_schema_and_refused(operator: Api) -> None:
    for component, body in (("JobCreateRequest", {}), ("GraftTaskRequest", {"name": "n"})):
        assert allows(component, {**body, "kind": "test.noop"})
        assert not allows(component, {**body, "kind": "headgate:workflow"})
    assert operator.post("/api/v1/jobs", {"kind": "test.noop"}).status_code == 201
    refused(operator.post("/api/v1/jobs", {"kind": "headgate:workflow"}), 422, "internal_kind")
    job = enqueue_job()
    body = {"action": "cancel", "expected_count": 1, "filter": {"ids": [job]}}
    assert allows("BulkActionRequest", {**body, "filter": {"kind": "test.noop"}})
    forbidden = {**body, "filter": {"kind": "headgate:timer"}}
    assert not allows("BulkActionRequest", forbidden)
    refused(operator.post("/api/v1/jobs/actions", forbidden), 422, "internal_kind")


def test_a_queue_name_outside_the_grammar_is_forbidden_by_the_schema_and_refused(
    operator: Api,
) -> None:
    assert allows("JobCreateRequest", {"kind": "test.noop", "queue": "reports.eu-1:b"})
    assert not allows("JobCreateRequest", {"kind": "test.noop", "queue": "no spaces"})
    assert not allows("StartRequest", {"name": "api-wait", "version": "1", "task_queue": "é"})
    created = operator.post("/api/v1/jobs", {"kind": "test.noop", "queue": "reports.eu-1:b"})
    assert created.status_code == 201, created.content
    bad = {"kind": "test.noop", "queue": "no spaces"}
    refused(operator.post("/api/v1/jobs", bad), 422, "invalid_definition")


def test_a_durable_name_with_an_outer_space_is_forbidden_by_the_schema_and_refused(
    operator: Api,
) -> None:
    start = {"name": "api-wait", "version": "1", "input": 1}
    assert allows("StartRequest", {**start, "business_idempotency_key": "order: 1"})
    assert not allows("StartRequest", {**start, "business_idempotency_key": "order:1\xa0"})
    assert not allows("StartRequest", {**start, "workflow_id": "a/b"})
    ok = operator.post("/api/v1/durable/executions", {**start, "business_idempotency_key": "o 1"})
    assert ok.status_code == 201, ok.content
    bad = {**start, "business_idempotency_key": "order:1\xa0"}
    error = refused(operator.post("/api/v1/durable/executions", bad), 400, "invalid")
    assert "business_idempotency_key" in error["detail"]


def _check_name_takes(value: str) -> bool:
    try:
        check_name("name", value, 255)
    except DefinitionError:
        return False
    return True


def test_the_durable_name_pattern_is_what_check_name_takes() -> None:
    """The pattern restates ``check_name`` (which the runtime keeps, for Python callers):
    they agree on every whitespace and control character, at either end and inside."""
    pattern = SCHEMA["components"]["schemas"]["StartRequest"]["properties"]["name"]["pattern"]
    validator = jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
    spaces = {c for c in map(chr, range(0x3001)) if c.isspace()}
    assert spaces - {chr(c) for c in range(0x20)} == set(_expand(OUTER_SPACE))
    for char in spaces | {chr(c) for c in range(0x20)} | {"\ufeff", "a"}:
        for value in (char, f"{char}a", f"a{char}", f"a{char}a"):
            assert validator.is_valid(value) == _check_name_takes(value), repr(value)


def _expand(char_class: str) -> list[str]:
    """The characters of a regex class body such as ``" \\u2000-\\u200a"``."""
    chars: list[str] = []
    i = 0
    while i < len(char_class):
        if i + 2 < len(char_class) and char_class[i + 1] == "-":
            chars.extend(map(chr, range(ord(char_class[i]), ord(char_class[i + 2]) + 1)))
            i += 3
        else:
            chars.append(char_class[i])
            i += 1
    return chars


@pytest.mark.parametrize(
    "body",
    [
        {"spec": "@every 30s"},
        {"spec": "@every 30s", "task": "test.noop", "workflow": "factory"},
    ],
)
def test_a_schedule_needs_exactly_one_target(operator: Api, body: dict[str, Any]) -> None:
    good = {"spec": "@every 30s", "task": "test.noop", "paused": True}
    assert allows("UpsertRequest", good)
    assert operator.put("/api/v1/schedules/one", good).status_code in (200, 201)
    assert not allows("UpsertRequest", body)
    refused(operator.put("/api/v1/schedules/two", body), 422, "invalid_schedule")


@pytest.mark.parametrize(
    "extra",
    [
        {"action": "reschedule"},
        {"action": "cancel", "delay_ms": 1},
        {"action": "delete", "scheduled_at": "2030-01-01T00:00:00Z"},
    ],
)
def test_a_bulk_action_takes_an_instant_exactly_when_it_reschedules(
    operator: Api, extra: dict[str, Any]
) -> None:
    body = {"expected_count": 1, "filter": {"ids": [enqueue_job()]}}
    good = {**body, "action": "reschedule", "delay_ms": 0}
    assert allows("BulkActionRequest", good)
    assert operator.post("/api/v1/jobs/actions", good).status_code == 200
    assert not allows("BulkActionRequest", {**body, **extra})
    refused(operator.post("/api/v1/jobs/actions", {**body, **extra}), 422, "invalid_definition")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/jobs", {"kind": "test.noop", "rate_class": 0}, "rate_class"),
        ("/api/v1/jobs", {"kind": "test.noop", "pending": 0}, "pending"),
        ("/api/v1/jobs", {"kind": "test.noop", "priority": "1"}, "priority"),
        ("/api/v1/durable/executions", {"name": "api-wait", "version": 1}, "version"),
        (
            "/api/v1/jobs/actions",
            {"action": "cancel", "expected_count": 0, "filter": {"ids": [0]}},
            "filter",
        ),
    ],
)
def test_a_value_of_another_json_type_is_refused(
    operator: Api, path: str, body: dict[str, Any], field: str
) -> None:
    """DRF alone converts ``0`` to ``"0"`` or ``false`` and ``"1"`` to ``1``; the schema
    allows none of them, and neither does the server."""
    error = refused(operator.post(path, body), 400, "invalid")
    assert field in error["detail"], error

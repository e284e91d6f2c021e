"""Every route, tried by nobody, by a view-only user and by an operator.

Anonymous callers get 401 (token authentication comes first in the test settings, so
the answer names its scheme); a viewer reads but every mutation is 403 — before the
Idempotency-Key is even looked at; an operator succeeds.

User data (headgate_django.visibility) needs ``view_job_payload``: without it a route that
is nothing but user data is 403 ``payload_permission_required``, and every other answer,
reads and mutations alike, carries its user-data fields as null with ``redacted: true``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.api.conftest import Api
from tests.api.routes import ROUTES, Route
from tests.user_data import SECRET, UserData, seed_user_data

pytestmark = pytest.mark.django_db


def call(api: Api, route: Route) -> Any:
    path, body = route.setup()
    if route.is_read:
        return api.get(path)
    return api.send(route.method, path, body if body is not None else None)


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_anonymous_is_refused(anon: Api, route: Route) -> None:
    response = call(anon, route)
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Token"


#: Keys whose values are user data wherever they appear in an answer.
PRIVATE_KEYS = {"payload", "source", "input", "result", "meta", "checkpoint", "cursor"}


def private_values(body: Any, path: str = "") -> list[str]:
    """Where ``body`` holds a non-null value under a user-data key."""
    found: list[str] = []
    if isinstance(body, dict):
        for key, value in body.items():
            if key in PRIVATE_KEYS and value is not None:
                found.append(f"{path}.{key}")
            found += private_values(value, f"{path}.{key}")
    elif isinstance(body, list):
        for n, item in enumerate(body):
            found += private_values(item, f"{path}[{n}]")
    return found


def assert_no_user_data(route: Route, response: Any) -> None:
    if route.user_data and route.is_read:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "payload_permission_required"
        return
    assert response.status_code == route.status, response.content
    if response.content:
        assert private_values(response.json()) == []


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_viewer_reads_but_cannot_mutate(viewer: Api, route: Route) -> None:
    response = call(viewer, route)
    if route.is_read:
        assert_no_user_data(route, response)
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_operator_without_payload_permission_sees_no_user_data(
    blind_operator: Api, route: Route
) -> None:
    assert_no_user_data(route, call(blind_operator, route))


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_operator_succeeds(operator: Api, route: Route) -> None:
    response = call(operator, route)
    assert response.status_code == route.status, response.content


def test_the_table_covers_every_route_in_the_schema(operator: Api) -> None:
    schema = operator.get("/api/v1/schema/").json()
    documented = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    }
    assert documented == {(r.method, r.template) for r in ROUTES}


def sweep(data: UserData) -> dict[str, str]:
    """A path of every read route, at the objects that hold the secret."""
    job = f"/api/v1/jobs/{data.job_id}"
    wf = f"/api/v1/workflows/{data.workflow_id}"
    ex = f"/api/v1/durable/executions/{data.execution_id}"
    paths = {
        "/api/v1/healthz": "/api/v1/healthz",
        "/api/v1/readyz": "/api/v1/readyz",
        "/api/v1/meta": "/api/v1/meta",
        "/api/v1/jobs": "/api/v1/jobs",
        "/api/v1/jobs/counts": "/api/v1/jobs/counts",
        "/api/v1/jobs/{id}": job,
        "/api/v1/jobs/{id}/result": f"{job}/result",
        "/api/v1/jobs/{id}/checkpoint": f"{job}/checkpoint",
        "/api/v1/jobs/{id}/output": f"{job}/output",
        "/api/v1/jobs/{id}/effects": f"{job}/effects",
        "/api/v1/jobs/{id}/progress": f"{job}/progress",
        "/api/v1/jobs/{id}/logs": f"{job}/logs",
        "/api/v1/queues": "/api/v1/queues",
        "/api/v1/quarantine": "/api/v1/quarantine",
        "/api/v1/workflows": "/api/v1/workflows",
        "/api/v1/workflows/{workflow_id}": wf,
        "/api/v1/workflows/{workflow_id}/nodes/{node}": f"{wf}/nodes/first",
        "/api/v1/workflows/{workflow_id}/nodes/{node}/dependencies": f"{wf}/nodes/first/"
        "dependencies",
        "/api/v1/workflows/{workflow_id}/nodes/{node}/dependents": f"{wf}/nodes/first/dependents",
        "/api/v1/workflows/{workflow_id}/events": f"{wf}/events",
        "/api/v1/workflows/{workflow_id}/signals": f"{wf}/signals",
        "/api/v1/durable/executions": "/api/v1/durable/executions",
        "/api/v1/durable/executions/{workflow_id}": ex,
        "/api/v1/durable/executions/{workflow_id}/history": f"{ex}/history",
        "/api/v1/durable/executions/{workflow_id}/queries/{query_name}": f"{ex}/queries/order",
        "/api/v1/durable/executions/{workflow_id}/updates/{update_name}/{update_id}": f"{ex}/"
        "updates/echo/u-secret",
        "/api/v1/schedules": "/api/v1/schedules",
        "/api/v1/schedules/{name}": "/api/v1/schedules/secret-schedule",
        "/api/v1/schedules/{name}/events": "/api/v1/schedules/secret-schedule/events",
        "/api/v1/workers": "/api/v1/workers",
        "/api/v1/workers/{worker_id}": "/api/v1/workers/secret-worker",
        "/api/v1/jobs/{id}/admission": f"{job}/admission",
        "/api/v1/admission/rate-classes": "/api/v1/admission/rate-classes",
        "/api/v1/admission/concurrency-limits": "/api/v1/admission/concurrency-limits",
        "/api/v1/admission/backpressure": "/api/v1/admission/backpressure",
        "/api/v1/admission/queue-weights": "/api/v1/admission/queue-weights",
        "/api/v1/admission/fairness": "/api/v1/admission/fairness",
    }
    assert set(paths) == {r.template for r in ROUTES if r.is_read}, "a read route is missing"
    return paths


def test_viewer_finds_the_secret_nowhere(viewer: Api) -> None:
    paths = sweep(seed_user_data())
    for template, path in paths.items():
        response = viewer.get(path)
        assert response.status_code in (200, 403), (template, response.content)
        assert SECRET not in response.content.decode(), template
    job = paths["/api/v1/jobs/{id}"]
    refused = viewer.get(job, {"include_payload": "1"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "payload_permission_required"
    # the message names the permission to grant, on one line
    assert refused.json()["error"]["message"] == (
        "Reading user data (payloads, results, checkpoints, history) needs the "
        "headgate_django.view_job_payload permission."
    )


def test_the_payload_permission_reveals_every_kind_of_user_data(operator: Api) -> None:
    paths = sweep(seed_user_data())
    for template in (
        "/api/v1/jobs/{id}/result",
        "/api/v1/jobs/{id}/checkpoint",
        "/api/v1/jobs/{id}/effects",
        "/api/v1/workflows/{workflow_id}/signals",
        "/api/v1/durable/executions/{workflow_id}",
        "/api/v1/durable/executions/{workflow_id}/history",
        "/api/v1/durable/executions/{workflow_id}/queries/{query_name}",
        "/api/v1/durable/executions/{workflow_id}/updates/{update_name}/{update_id}",
    ):
        response = operator.get(paths[template])
        assert response.status_code == 200, (template, response.content)
        assert SECRET in response.content.decode(), template
    signal = operator.get(paths["/api/v1/workflows/{workflow_id}/signals"]).json()["signals"][0]
    assert signal["redacted"] is False and signal["source"] == {"actor": SECRET}
    execution = operator.get(paths["/api/v1/durable/executions/{workflow_id}"]).json()
    assert execution["redacted"] is False
    assert (execution["input"], execution["meta"]) == ({"order": SECRET}, {"note": SECRET})
    output = operator.get(paths["/api/v1/jobs/{id}/output"]).json()["output"]
    assert base64.b64decode(output).decode() == f"output-{SECRET}"
    detail = operator.get(paths["/api/v1/jobs/{id}"], {"include_payload": "1"}).json()
    assert SECRET in base64.b64decode(detail["payload"]).decode()


def test_redacted_answers_keep_their_shape(viewer: Api, blind_operator: Api) -> None:
    data = seed_user_data()
    signals = viewer.get(f"/api/v1/workflows/{data.workflow_id}/signals").json()["signals"]
    assert signals[0]["redacted"] is True
    assert (signals[0]["payload"], signals[0]["source"]) == (None, None)
    assert signals[0]["idempotency_key"] == "key-1"
    execution = viewer.get(f"/api/v1/durable/executions/{data.execution_id}").json()
    assert execution["redacted"] is True and execution["state"] == "succeeded"
    assert (execution["input"], execution["result"], execution["meta"]) == (None, None, None)
    receipt = blind_operator.post(
        f"/api/v1/workflows/{data.workflow_id}/signals",
        {"signal": "approved", "payload": {"by": SECRET}},
    )
    assert receipt.status_code == 200, receipt.content
    assert receipt.json()["emission"]["redacted"] is True
    assert SECRET not in json.dumps(receipt.json())

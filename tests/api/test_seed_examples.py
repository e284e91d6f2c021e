"""The control-API examples of the workflow guide (seed ``000_46d84ad11b5dd1ec.txt``), sent
as the curl commands send them: same paths (``onboarding%3A42`` and ``onboarding:42``),
headers and bodies."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from headgate_django import enqueue, testing
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow, list_signals
from tests.api import defs
from tests.api.conftest import Api
from tests.app import tasks

pytestmark = pytest.mark.django_db

SIGNAL_BODY = """{
    "signal": "approved",
    "payload": {"approved": true, "reviewer": "Ada"},
    "source": {"emitter": "admin-api", "actor": "operator-42"}
  }"""

RETRY_BODY = """{
    "expected_revision": 1,
    "recoveries": [
      {"node": "send-welcome", "payload": "eyJlbWFpbCI6Im5ld0BleGFtcGxlLmNvbSJ9", "schema_version": 2}
    ]
  }"""


def curl_post(api: Api, path: str, body: str, key: str) -> Any:
    return api.client.post(
        path, data=body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=key
    )


def test_signal_emission_with_idempotency_key(operator: Api, onboarding: str) -> None:
    response = curl_post(
        operator,
        "/api/v1/workflows/onboarding%3A42/signals",
        SIGNAL_BODY,
        "approval:ticket-1842",
    )
    assert response.status_code == 200, response.content
    receipt = response.json()
    assert receipt["matched"] == 1 and receipt["inserted"] is True and receipt["promoted"] == 1
    emission = receipt["emission"]
    assert emission["workflow_id"] == "onboarding:42"
    assert emission["idempotency_key"] == "approval:ticket-1842"
    assert emission["payload"] == {"approved": True, "reviewer": "Ada"}
    assert emission["source"] == {"emitter": "admin-api", "actor": "operator-42"}
    # The same emission through the Python API sees the API's record.
    assert list_signals("onboarding:42")[0].payload["reviewer"] == "Ada"
    # Sending the command again replays the answer byte for byte.
    again = curl_post(
        operator,
        "/api/v1/workflows/onboarding%3A42/signals",
        SIGNAL_BODY,
        "approval:ticket-1842",
    )
    assert (again.status_code, again.content) == (response.status_code, response.content)
    testing.run_jobs()
    assert inspect_workflow("onboarding:42").coordinator_state == "completed"


def test_signal_history_with_limit(operator: Api, onboarding: str) -> None:
    for n in range(3):
        body = SIGNAL_BODY.replace('"Ada"', f'"Ada {n}"')
        sent = curl_post(operator, "/api/v1/workflows/onboarding%3A42/signals", body, f"k{n}")
        assert sent.status_code == 200
    response = operator.get("/api/v1/workflows/onboarding%3A42/signals?limit=100")
    assert response.status_code == 200
    history = response.json()
    assert [s["payload"]["reviewer"] for s in history["signals"]] == ["Ada 2", "Ada 1", "Ada 0"]
    assert history["next_cursor"] is None
    page = operator.get("/api/v1/workflows/onboarding:42/signals", {"limit": 2}).json()
    assert len(page["signals"]) == 2 and page["next_cursor"] is not None
    rest = operator.get(
        "/api/v1/workflows/onboarding:42/signals", {"limit": 2, "cursor": page["next_cursor"]}
    ).json()
    assert [s["payload"]["reviewer"] for s in rest["signals"]] == ["Ada 0"]


def test_retry_with_recoveries(operator: Api) -> None:
    enqueue(
        Workflow("onboarding:42")
        .failed_subgraph_retry()
        .add("create-account", tasks.echo.envelope(value=1), [])
        .add(
            "send-welcome",
            replace(defs.send_welcome.envelope(), payload=b"\xff"),
            ["create-account"],
        )
        .add("after", tasks.echo.envelope(value=3), ["send-welcome"])
        .prepare()
    )
    testing.run_jobs(include_scheduled=True)
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.coordinator_state == "archived"
    assert snapshot.node("send-welcome").state == "undecodable"

    response = curl_post(
        operator, "/api/v1/workflows/onboarding:42/retry", RETRY_BODY, "onboarding-42-retry-1"
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "workflow_id": "onboarding:42",
        "revision": 2,
        "generation": 2,
        "receipt_id": response.json()["receipt_id"],
    }
    node = Job.objects.get(pk="onboarding:42:send-welcome")
    assert bytes(node.payload) == b'{"email":"new@example.com"}'
    assert node.schema_version == 2
    assert Job.objects.get(pk="onboarding:42:coordinator").state == "available"
    # A repeated command is answered from the record; it does not retry twice.
    again = curl_post(
        operator, "/api/v1/workflows/onboarding:42/retry", RETRY_BODY, "onboarding-42-retry-1"
    )
    assert (again.status_code, again.content) == (200, response.content)
    assert again["Idempotent-Replayed"] == "true"
    testing.run_jobs(include_scheduled=True)
    snapshot = inspect_workflow("onboarding:42")
    assert (snapshot.revision, snapshot.generation) == (2, 2)
    assert snapshot.node("create-account").state == "completed"

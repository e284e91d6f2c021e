"""The API's ways in refuse internal kinds (``headgate:…``), and its generic job verbs refuse
internal jobs, with ``422 internal_kind`` in the error envelope and nothing written."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from headgate_django import durable, testing
from headgate_django.kernel import names
from headgate_django.models import HistoryEvent, Job
from tests.api.conftest import Api
from tests.api.test_errors import envelope

pytestmark = pytest.mark.django_db

GRAPH = {"workflow_id": "forged", "nodes": [{"name": "a", "job_id": "forged:a", "kind": "task"}]}
FORGED = {"kwargs": {"graph": GRAPH, "options": {}}}


@pytest.mark.parametrize(
    "kind",
    [
        names.COORDINATOR_KIND,
        names.TIMER_KIND,
        names.SIGNAL_KIND,
        names.GRAFT_KIND,
        names.DURABLE_OP_KIND,
        "headgate:not-registered",
    ],
)
def test_post_jobs_refuses_an_internal_kind(operator: Api, kind: str) -> None:
    for body in ({"kind": kind, **FORGED}, {"kind": kind, "payload": "e30=", "id": "x"}):
        error = envelope(operator.post("/api/v1/jobs", body), 422, "internal_kind")
        assert error["detail"]["kind"] == kind
    assert not Job.objects.exists()  # so no workflow without an id is listed either


def test_a_graft_through_the_api_cannot_carry_an_internal_kind(
    operator: Api, onboarding: str
) -> None:
    before = Job.objects.count()
    body = {
        "expected_revision": 1,
        "tasks": [{"name": "sneaky", "kind": names.COORDINATOR_KIND, **FORGED}],
    }
    response = operator.post(f"/api/v1/workflows/{onboarding}/grafts", body)
    envelope(response, 422, "internal_kind")
    assert Job.objects.count() == before


def test_the_payload_of_a_coordinator_cannot_be_replaced(operator: Api, onboarding: str) -> None:
    job_id = f"{onboarding}:coordinator"
    before = bytes(Job.objects.get(pk=job_id).payload)
    forged = base64.b64encode(b'{"graph": {}}').decode()
    response = operator.put(f"/api/v1/jobs/{job_id}/payload", {"payload": forged})
    error = envelope(response, 422, "internal_kind")
    assert "cancel_workflow" in error["message"]
    assert error["detail"] == {
        "kind": names.COORDINATOR_KIND,
        "id": job_id,
        "verb": "payload replacement",
    }
    assert bytes(Job.objects.get(pk=job_id).payload) == before


def uncertain(operator: Api) -> tuple[str, str]:
    """An execution suspended on an uncertain Operation, and that Operation's job id."""
    started = operator.post("/api/v1/durable/executions", {"name": "api-unsure", "version": "1"})
    workflow_id = started.json()["workflow_id"]
    for _ in range(5):
        testing.run_jobs()
    assert durable.Manager().get(workflow_id).state == "suspended"
    return workflow_id, f"{workflow_id}:op:1"


def test_an_uncertain_operations_job_cannot_be_deleted(operator: Api) -> None:
    workflow_id, job_id = uncertain(operator)
    error = envelope(operator.delete(f"/api/v1/jobs/{job_id}"), 422, "internal_kind")
    assert "resolve_uncertain" in error["message"]
    assert "resolve-uncertain" in error["message"]
    assert Job.objects.filter(pk=job_id).exists()
    # The operator's own verb still finds it.
    resolve = {"command_id": "op:1", "decision": "complete", "result": "paid"}
    base = f"/api/v1/durable/executions/{workflow_id}"
    assert operator.post(f"{base}/resolve-uncertain", resolve).status_code == 200
    testing.run_jobs()
    assert operator.get(base).json()["result"] == "paid"


def test_an_uncertain_operation_is_not_rerun_by_a_generic_retry(operator: Api) -> None:
    workflow_id, job_id = uncertain(operator)
    envelope(operator.post(f"/api/v1/jobs/{job_id}/retry"), 422, "internal_kind")
    for _ in range(3):
        testing.run_jobs()
    uncertain_events = HistoryEvent.objects.filter(
        execution_id=workflow_id, type="OperationUncertain"
    )
    assert uncertain_events.count() == 1
    assert Job.objects.get(pk=job_id).state == "archived"


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("DELETE", "", None),
        ("POST", "/retry", None),
        ("POST", "/cancel", None),
        ("POST", "/promote", None),
        ("POST", "/reschedule", {"delay_ms": 60000}),
        ("PUT", "/payload", {"payload": "e30="}),
    ],
)
def test_every_generic_verb_refuses_the_workflow_task_of_an_execution(
    operator: Api, method: str, suffix: str, body: Any
) -> None:
    workflow_id, _ = uncertain(operator)
    job_id = f"{workflow_id}:task"
    before = Job.objects.filter(pk=job_id).values().get()
    response = operator.send(method, f"/api/v1/jobs/{job_id}{suffix}", body)
    error = envelope(response, 422, "internal_kind")
    assert "durable.Manager().cancel" in error["message"]
    assert Job.objects.filter(pk=job_id).values().get() == before


def test_a_signal_nodes_job_points_to_emit_signal(operator: Api, onboarding: str) -> None:
    job_id = f"{onboarding}:approval"
    error = envelope(operator.post(f"/api/v1/jobs/{job_id}/promote"), 422, "internal_kind")
    assert "emit_signal" in error["message"]
    assert Job.objects.get(pk=job_id).state == "pending"

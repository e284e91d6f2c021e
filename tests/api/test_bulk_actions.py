"""``POST /api/v1/jobs/actions``: an action over a filter, guarded by ``expected_count``;
errors in the one envelope, nothing changed on any of them; the large case as a job."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from headgate_django import testing
from headgate_django.kernel.states import State
from headgate_django.models import Job
from tests.api.conftest import Api
from tests.conformance.helpers import fresh_queue, job_in_state, state_of

pytestmark = pytest.mark.django_db
URL = "/api/v1/jobs/actions"


def archived(n: int) -> tuple[str, list[str]]:
    q = fresh_queue()
    return q, [job_in_state(State.ARCHIVED, queue=q)[0] for _ in range(n)]


def body(action: str, expected: int, **filters: Any) -> dict[str, Any]:
    return {"action": action, "filter": filters, "expected_count": expected}


def test_a_retry_over_a_queue(operator: Api) -> None:
    q, ids = archived(2)
    response = operator.post(URL, body("retry", 2, queue=q, states=["archived"]))
    assert response.status_code == 200, response.content
    assert response.json() == {"action": "retry", "matched": 2, "changed": 2, "job_id": None}
    assert {state_of(i) for i in ids} == {"available"}


def test_a_count_mismatch_is_a_409_with_the_actual_count(operator: Api) -> None:
    q, ids = archived(2)
    response = operator.post(URL, body("delete", 5, queue=q))
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "count_mismatch"
    assert error["detail"] == {"expected_count": 5, "actual_count": 2}
    assert {state_of(i) for i in ids} == {"archived"}


def test_reschedule_needs_exactly_one_instant(operator: Api) -> None:
    q = fresh_queue()
    job_id, _ = job_in_state(State.PENDING, queue=q)
    for extra in ({}, {"delay_ms": 1000, "scheduled_at": "2030-01-01T00:00:00Z"}):
        response = operator.post(URL, {**body("reschedule", 1, queue=q), **extra})
        assert response.status_code == 422, extra
        assert "exactly one of scheduled_at or delay_ms" in response.json()["error"]["message"]
    ok = operator.post(URL, {**body("reschedule", 1, queue=q), "delay_ms": 60_000})
    assert ok.json()["changed"] == 1 and state_of(job_id) == "scheduled"
    wrong = operator.post(URL, {**body("cancel", 1, queue=q), "delay_ms": 5})
    assert wrong.status_code == 422
    assert state_of(job_id) == "scheduled"  # nothing changed


@pytest.mark.parametrize(
    "sent",
    [
        {"action": "archive", "filter": {"queue": "q"}, "expected_count": 0},
        {"action": "retry", "filter": {}, "expected_count": 0},
        {"action": "retry", "filter": {"queue": "q"}},
        {"action": "retry", "filter": {"queue": "q"}, "expected_count": -1},
        {"action": "retry", "filter": {"shelf": "q"}, "expected_count": 0},
        {"action": "retry", "filter": {"states": ["gone"]}, "expected_count": 0},
        {"action": "retry", "filter": {"enqueued_after": "yesterday"}, "expected_count": 0},
        {"action": "retry", "filter": {"ids": []}, "expected_count": 0},
        {"action": "retry", "filter": {"queue": "q"}, "expected_count": 0, "why": 1},
    ],
)
def test_malformed_bodies_are_400s(operator: Api, sent: dict[str, Any]) -> None:
    response = operator.post(URL, sent)
    assert response.status_code == 400, response.content
    assert "error" in response.json()


def test_internal_kinds_are_refused(operator: Api) -> None:
    response = operator.post(URL, body("cancel", 1, kind="headgate:workflow"))
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "internal_kind"


def test_above_the_cap_is_a_413_and_nothing_changes(operator: Api) -> None:
    q, ids = archived(3)
    with override_settings(HEADGATE={"BULK_MAX_JOBS": 2, "BULK_SYNC_LIMIT": 1}):
        response = operator.post(URL, body("retry", 3, queue=q))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "bulk_too_large"
    assert {state_of(i) for i in ids} == {"archived"}


def test_above_the_sync_limit_it_is_a_202_with_the_job_and_its_progress(operator: Api) -> None:
    q, ids = archived(3)
    with override_settings(HEADGATE={"BULK_SYNC_LIMIT": 2}):
        response = operator.post(URL, body("retry", 3, queue=q))
    assert response.status_code == 202
    job_id = response.json()["job_id"]
    assert response.json()["changed"] is None and response.json()["matched"] == 3
    assert Job.objects.get(pk=job_id).kind == "headgate:bulk-action"
    testing.run_one(queues=["headgate-bulk"])
    progress = operator.get(f"/api/v1/jobs/{job_id}/progress").json()["progress"]
    assert (progress["current"], progress["total"]) == (3, 3)
    assert {state_of(i) for i in ids} == {"available"}


def test_the_idempotency_key_replays_the_first_answer(operator: Api) -> None:
    q, _ = archived(1)
    first = operator.post(URL, body("retry", 1, queue=q), key="bulk-1")
    again = operator.post(URL, body("retry", 1, queue=q), key="bulk-1")
    assert (
        first.json()
        == again.json()
        == {
            "action": "retry",
            "matched": 1,
            "changed": 1,
            "job_id": None,
        }
    )
    assert operator.post(URL, body("retry", 1, queue=q), key=None).status_code == 400


def test_a_viewer_may_not(viewer: Api) -> None:
    q, ids = archived(1)
    assert viewer.post(URL, body("retry", 1, queue=q)).status_code == 403
    assert state_of(ids[0]) == "archived"

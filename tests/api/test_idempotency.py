"""Idempotency-Key: required, replayed byte for byte, refused when reused, expiring."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from headgate_django.kernel.states import State
from headgate_django.models import IdempotencyRecord, Job
from headgate_django.store.idempotency import idempotency_purge_expired
from headgate_django.worker.duties import default_duties
from tests.api.conftest import Api, onboarding_workflow
from tests.api.routes import ROUTES
from tests.conformance.helpers import job_in_state

pytestmark = pytest.mark.django_db


def test_replay_returns_the_same_status_and_body(operator: Api) -> None:
    first = operator.post("/api/v1/jobs", {"kind": "test.noop"}, key="create-1")
    assert first.status_code == 201
    again = operator.post("/api/v1/jobs", {"kind": "test.noop"}, key="create-1")
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again["Content-Type"] == first["Content-Type"] == "application/json"
    assert again["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert Job.objects.filter(kind="test.noop").count() == 1  # enqueued once


def test_replay_ignores_json_formatting(operator: Api) -> None:
    first = operator.client.post(
        "/api/v1/jobs",
        '{"kind": "test.noop"}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="f",
    )
    again = operator.client.post(
        "/api/v1/jobs",
        '{\n  "kind":"test.noop"\n}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="f",
    )
    assert (again.status_code, again.content) == (201, first.content)


def test_replay_of_an_empty_response_keeps_its_headers(operator: Api) -> None:
    job_id, _ = job_in_state(State.QUARANTINED)
    path = f"/api/v1/quarantine/{Job.objects.get(pk=job_id).fingerprint}"
    first = operator.delete(path, key="release-1")
    again = operator.delete(path, key="release-1")
    assert first.status_code == again.status_code == 204
    assert first.content == again.content == b""
    assert first["X-Released-Jobs"] == again["X-Released-Jobs"] == "1"


def test_a_different_body_with_the_same_key_is_409(operator: Api) -> None:
    assert operator.post("/api/v1/jobs", {"kind": "test.noop"}, key="k").status_code == 201
    response = operator.post("/api/v1/jobs", {"kind": "test.echo"}, key="k")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert not Job.objects.filter(kind="test.echo").exists()


def test_a_different_route_with_the_same_key_is_409(operator: Api) -> None:
    assert operator.post("/api/v1/queues/a/pause?create=true", key="k").status_code == 204
    response = operator.post("/api/v1/queues/b/pause?create=true", key="k")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_key_reused"


def test_keys_belong_to_their_user(operator: Api, operator_user: Any) -> None:
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    other = User.objects.create_user("other")
    other.user_permissions.set(operator_user.user_permissions.all())
    client = APIClient()
    client.force_authenticate(User.objects.get(pk=other.pk))
    assert operator.post("/api/v1/queues/a/pause?create=true", key="shared").status_code == 204
    assert Api(client).post("/api/v1/queues/b/pause?create=true", key="shared").status_code == 204


@pytest.mark.parametrize("route", [r for r in ROUTES if not r.is_read], ids=str)
def test_every_mutation_needs_a_key(operator: Api, route: Any) -> None:
    path, body = route.setup()
    response = operator.send(route.method, path, body, key=None)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "idempotency_key_required"


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "tab\there", "é"])
def test_malformed_keys_are_400(operator: Api, key: str) -> None:
    response = operator.post("/api/v1/queues/a/pause?create=true", key=key)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "idempotency_key_required"


def test_a_failed_mutation_records_nothing(operator: Api) -> None:
    job_id, _ = job_in_state(State.AVAILABLE)
    failed = operator.post(f"/api/v1/jobs/{job_id}/retry", key="r")  # available: refused
    assert failed.status_code == 409
    assert not IdempotencyRecord.objects.exists()
    Job.objects.filter(pk=job_id).update(state="cancelled")
    assert operator.post(f"/api/v1/jobs/{job_id}/retry", key="r").status_code == 200


def test_signal_emission_reuses_the_key_as_its_idempotency_key(operator: Api) -> None:
    onboarding_workflow()
    path = "/api/v1/workflows/onboarding:42/signals"
    body = {"signal": "approved", "payload": 1}
    first = operator.post(path, body, key="sig-1")
    IdempotencyRecord.objects.all().delete()  # as if the response record had expired
    again = operator.post(path, body, key="sig-1")
    assert again.status_code == 200
    assert again.json()["inserted"] is False
    assert again.json()["emission"] == first.json()["emission"]
    reused = operator.post(path, {**body, "payload": 2}, key="sig-1")
    assert reused.json()["error"]["code"] == "idempotency_key_reused"  # the API's record
    IdempotencyRecord.objects.all().delete()
    conflict = operator.post(path, {**body, "payload": 2}, key="sig-1")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "id_conflict"  # the signal's own horizon


def test_records_expire_after_the_configured_window(operator: Api, settings: Any) -> None:
    settings.HEADGATE = {"IDEMPOTENCY_TTL": timedelta(hours=1)}
    assert operator.post("/api/v1/queues/a/pause?create=true", key="k").status_code == 204
    record = IdempotencyRecord.objects.get()
    assert timedelta(minutes=59) < record.expires_at - record.created_at <= timedelta(hours=1)
    IdempotencyRecord.objects.update(expires_at=record.created_at - timedelta(seconds=1))
    # Expired: the key is free again even before the purge ran.
    assert operator.post("/api/v1/queues/b/pause?create=true", key="k").status_code == 204
    assert IdempotencyRecord.objects.get().path == "/api/v1/queues/b/pause?create=true"


def test_the_purge_duty_deletes_expired_records(operator: Api) -> None:
    for n in range(3):
        operator.post(f"/api/v1/queues/q{n}/pause?create=true", key=f"k{n}")
    IdempotencyRecord.objects.filter(key__in=["k0", "k1"]).update(
        expires_at=IdempotencyRecord.objects.get(key="k2").created_at - timedelta(seconds=1)
    )
    duty = next(d for d in default_duties() if d.name == "idempotency-purge")
    assert duty.run() == {"purged": 2, "more": False}
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["k2"]
    assert idempotency_purge_expired() == 0


@pytest.mark.usefixtures("unprepared")
def test_a_read_does_not_touch_the_records(operator: Api) -> None:
    with CaptureQueriesContext(connection) as queries:
        assert operator.get("/api/v1/jobs").status_code == 200
    assert not any("headgate_idempotency" in q["sql"] for q in queries.captured_queries)


def test_a_replay_shows_no_more_than_a_fresh_answer_would(
    operator: Api, operator_user: Any
) -> None:
    """A response recorded with user data is not replayed to its user once the payload
    permission is gone: the mutation stays done, its answer is refused."""
    from django.contrib.auth.models import Permission, User

    from tests.api.conftest import _api

    started = operator.post(
        "/api/v1/durable/executions", {"name": "api-wait", "version": "1", "input": "4111"}
    )
    base = f"/api/v1/durable/executions/{started.json()['workflow_id']}"
    first = operator.post(f"{base}/cancel", {}, key="cancel-1")
    assert first.status_code == 200 and first.json()["input"] == "4111"
    again = operator.post(f"{base}/cancel", {}, key="cancel-1")
    assert again.content == first.content and again["Idempotent-Replayed"] == "true"
    assert not again.has_header("X-Headgate-Revealed")  # kept with the record, never sent
    operator_user.user_permissions.remove(Permission.objects.get(codename="view_job_payload"))
    revoked = _api(User.objects.get(pk=operator_user.pk))
    assert revoked.get(base).json()["input"] is None  # a fresh answer is redacted
    replayed = revoked.post(f"{base}/cancel", {}, key="cancel-1")
    assert replayed.status_code == 403
    assert replayed.json()["error"]["code"] == "payload_permission_required"
    assert "4111" not in replayed.content.decode()
    # a response recorded without user data replays to anyone it was recorded for
    paused = revoked.post("/api/v1/queues/q/pause?create=true", key="pause-1")
    assert revoked.post("/api/v1/queues/q/pause?create=true", key="pause-1").status_code == (
        paused.status_code
    )

"""Admission over HTTP: the job fields in enqueue and job views."""

from __future__ import annotations

import pytest

from headgate_django.models import Job, QueueState
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def test_api_enqueue_and_show(operator: Api):
    response = operator.post(
        "/api/v1/jobs",
        {"kind": "test.noop", "partition_key": "acme", "rate_class": "email", "weight": 3},
    )
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    shown = operator.get(f"/api/v1/jobs/{job_id}").json()
    assert (shown["partition_key"], shown["rate_class"], shown["weight"]) == ("acme", "email", 3)
    listed = operator.get("/api/v1/jobs", {"queue": "default"}).json()["jobs"]
    assert any(j["id"] == job_id and j["partition_key"] == "acme" for j in listed)


@pytest.mark.parametrize(
    "body",
    [
        {"weight": 0},
        {"weight": "x"},
        {"partition_key": "p" * 129},
        {"partition_key": "é" * 65},
        {"rate_class": "bad name"},
    ],
    ids=["weight-0", "weight-str", "partition-long", "partition-bytes", "rate-class"],
)
def test_api_bad_fields(operator: Api, body):
    before = Job.objects.count()
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", **body})
    assert response.status_code == 400, response.content
    assert next(iter(body)) in response.content.decode()
    assert Job.objects.count() == before


def test_backpressure_is_429_with_its_numbers(operator: Api):
    from headgate_django import admission

    admission.set_backpressure("default", 1)
    assert operator.post("/api/v1/jobs", {"kind": "test.noop"}).status_code == 201
    before = Job.objects.count()
    response = operator.post("/api/v1/jobs", {"kind": "test.noop"})
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "backpressure"
    assert error["detail"] == {"queue": "default", "limit": 1, "current": 1, "incoming": 1}
    assert Job.objects.count() == before


def test_explain_route(operator: Api):
    from headgate_django import admission

    admission.set_concurrency_limit("default", 1)
    first = operator.post("/api/v1/jobs", {"kind": "test.noop"}).json()["id"]
    second = operator.post("/api/v1/jobs", {"kind": "test.noop"}).json()["id"]
    from datetime import timedelta

    from headgate_django import store

    store.job_claim(worker_id="t", limit=1, lease_ttl=timedelta(minutes=5), queues=["default"])
    body = operator.get(f"/api/v1/jobs/{second}/admission").json()
    assert body["admissible"] is False and body["blocked_by"] == "concurrency_limit"
    assert body["detail"]["running"] == 1
    assert operator.get(f"/api/v1/jobs/{first}/admission").json()["blocked_by"] is None
    assert operator.get("/api/v1/jobs/nope/admission").status_code == 404


def test_policy_routes_round_trip(operator: Api):
    r = operator.put(
        "/api/v1/admission/rate-classes/mail", {"limit": 50, "window_ms": 1000, "burst": 10}
    )
    assert r.status_code == 200, r.content
    assert r.json()["burst"] == 10 and r.json()["tokens"] == 10
    listed = operator.get("/api/v1/admission/rate-classes").json()["rate_classes"]
    assert [c["name"] for c in listed] == ["mail"]
    r = operator.put(
        "/api/v1/admission/concurrency-limits/reports",
        {"max_concurrent": 3, "on_saturated": "discard"},
    )
    assert r.json() == {"queue": "reports", "max_concurrent": 3, "on_saturated": "discard"}
    r = operator.put("/api/v1/admission/backpressure/imports", {"max_unfinished": 0})
    assert r.json() == {"queue": "imports", "max_unfinished": 0, "current": 0}
    for path in (
        "rate-classes/mail",
        "concurrency-limits/reports",
        "backpressure/imports",
    ):
        assert operator.delete(f"/api/v1/admission/{path}").status_code == 204
        assert operator.delete(f"/api/v1/admission/{path}").status_code == 404


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("rate-classes/mail", {"limit": 0, "window_ms": 1000}),
        ("rate-classes/mail", {"limit": 5, "window_ms": 0}),
        ("rate-classes/mail", {"limit": 5, "window_ms": 1000, "burst": -1}),
        ("rate-classes/mail", {"limit": 5}),
        ("rate-classes/mail", {"limit": 5, "window_ms": 10, "colour": "red"}),
        ("rate-classes/bad%20name", {"limit": 5, "window_ms": 10}),
        ("concurrency-limits/q", {"max_concurrent": 0}),
        ("concurrency-limits/q", {"max_concurrent": 3, "on_saturated": "drop"}),
        ("concurrency-limits/bad%20q", {"max_concurrent": 3}),
        ("backpressure/q", {"max_unfinished": -1}),
        ("backpressure/q", {"max_unfinished": "many"}),
        ("queue-weights/q", {"weight": 0}),
        ("queue-weights/q", {"weight": -3}),
        ("queue-weights/q", {"weight": 1.5}),
        ("queue-weights/q", {}),
        ("queue-weights/bad%20q", {"weight": 2}),
        ("queue-weights/" + "x" * 200, {"weight": 2}),
        ("fairness/q", {"quantum": 0}),
        ("fairness/q", {"credit_cap": -1}),
        ("fairness/q", {"quantum": 5, "colour": "red"}),
        ("fairness/bad%20q", {}),
    ],
)
def test_policy_routes_refuse_bad_input_and_write_nothing(operator: Api, path, body):
    from headgate_django.models import Backpressure, ConcurrencyLimit, Fairness, RateBucket

    response = operator.put(f"/api/v1/admission/{path}", body)
    assert response.status_code in (400, 422), response.content
    assert "error" in response.json()
    assert not RateBucket.objects.exists()
    assert not ConcurrencyLimit.objects.exists()
    assert not Backpressure.objects.exists()
    assert not Fairness.objects.exists()
    assert not QueueState.objects.exists()


def test_policy_writes_need_the_operator(viewer: Api):
    assert viewer.get("/api/v1/admission/rate-classes").status_code == 200
    r = viewer.put("/api/v1/admission/rate-classes/mail", {"limit": 5, "window_ms": 10})
    assert r.status_code == 403


def test_queue_weight_and_fairness_routes_round_trip(operator: Api):
    r = operator.put("/api/v1/admission/queue-weights/bulk", {"weight": 3})
    assert r.status_code == 200, r.content
    assert r.json() == {"queue": "bulk", "weight": 3, "dispatched": 0, "available": 0}
    listed = operator.get("/api/v1/admission/queue-weights").json()["queue_weights"]
    assert [w["queue"] for w in listed] == ["bulk"]
    r = operator.put("/api/v1/admission/fairness/tenants", {"quantum": 5})
    assert r.json() == {
        "queue": "tenants",
        "quantum": 5,
        "credit_cap": 40,
        "turn": None,
        "credit": 0,
    }
    assert [f["queue"] for f in operator.get("/api/v1/admission/fairness").json()["fairness"]] == [
        "tenants"
    ]
    for path in ("queue-weights/bulk", "fairness/tenants"):
        assert operator.delete(f"/api/v1/admission/{path}").status_code == 204
        assert operator.delete(f"/api/v1/admission/{path}").status_code == 404


def test_explain_route_names_fairness(operator: Api):
    from headgate_django import admission, enqueue
    from headgate_django.envelope import Envelope
    from headgate_django.store import job_claim

    admission.set_fairness("default", quantum=5)
    enqueue([Envelope(kind="test.noop", partition_key="a") for _ in range(10)])
    (waiting,) = enqueue([Envelope(kind="test.noop", partition_key="b")])
    from datetime import timedelta

    job_claim(worker_id="t", limit=2, lease_ttl=timedelta(minutes=5), queues=["default"])
    body = operator.get(f"/api/v1/jobs/{waiting}/admission").json()
    assert body["blocked_by"] == "fairness" and body["detail"]["turn"] == "a"

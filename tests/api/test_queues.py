"""``/queues`` and ``/quarantine``: counts, pause/resume (claims skip a paused queue),
quarantine list without sample payloads, release with ``X-Released-Jobs``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from headgate_django import store
from headgate_django.kernel.states import State
from headgate_django.models import Job, QueueState
from tests.api.conftest import Api
from tests.conformance.helpers import enqueue_job, job_in_state, unique_payload

pytestmark = pytest.mark.django_db


def claim(queue: str) -> list[str]:
    claimed = store.job_claim(worker_id="api", limit=5, lease_ttl=timedelta(minutes=1))
    return [c.ref.job_id for c in claimed if Job.objects.get(pk=c.ref.job_id).queue == queue]


def test_queue_list_counts_and_rates(operator: Api) -> None:
    job_in_state(State.COMPLETED, queue="mail")
    enqueue_job(queue="mail")
    enqueue_job(queue="mail", pending=True)
    queues = {q["name"]: q for q in operator.get("/api/v1/queues").json()["queues"]}
    mail = queues["mail"]
    assert mail["counts"] == {"available": 1, "pending": 1, "completed": 1}
    assert mail["total"] == 3
    assert mail["arrivals_last_minute"] == 3 and mail["completions_last_minute"] == 1
    assert mail["oldest_available_age_s"] >= 0 and mail["paused"] is False


def test_pause_makes_claims_skip_the_queue(operator: Api) -> None:
    job_id = enqueue_job(queue="mail")
    assert operator.post("/api/v1/queues/mail/pause").status_code == 204
    assert claim("mail") == []
    queues = {q["name"]: q for q in operator.get("/api/v1/queues").json()["queues"]}
    assert queues["mail"]["paused"] is True
    assert operator.post("/api/v1/queues/mail/resume").status_code == 204
    assert claim("mail") == [job_id]


def test_pausing_an_invalid_queue_name_is_422(operator: Api) -> None:
    assert operator.post("/api/v1/queues/-bad/pause").status_code == 422


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_queue_nothing_uses_is_404_and_gets_no_state(operator: Api, verb: str) -> None:
    response = operator.post(f"/api/v1/queues/typo/{verb}")
    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "unknown_queue"
    assert not QueueState.objects.exists()


def test_create_pre_pauses_a_queue_before_its_producers_exist(operator: Api) -> None:
    assert operator.post("/api/v1/queues/future/pause?create=true").status_code == 204
    assert QueueState.objects.get(name="future").paused is True
    # Now it has a switch, so resuming it (and pausing again) needs no flag.
    assert operator.post("/api/v1/queues/future/resume").status_code == 204
    assert QueueState.objects.get(name="future").paused is False


@pytest.mark.parametrize("create", ["", "maybe", "TRUE"])
def test_create_must_be_a_listed_flag(operator: Api, create: str) -> None:
    response = operator.post(f"/api/v1/queues/future/pause?create={create}")
    assert response.status_code == 400
    assert list(response.json()["error"]["detail"]) == ["create"]
    assert not QueueState.objects.exists()


def test_queues_of_jobs_and_of_registered_tasks_are_known(operator: Api) -> None:
    enqueue_job(queue="mail")
    assert operator.post("/api/v1/queues/mail/pause").status_code == 204
    assert not Job.objects.filter(queue="default").exists()  # the test tasks' queue
    assert operator.post("/api/v1/queues/default/pause").status_code == 204
    assert set(QueueState.objects.values_list("name", flat=True)) == {"mail", "default"}


def test_quarantine_list_hides_sample_payloads(operator: Api) -> None:
    payload = unique_payload(card="s3cret")
    job_id, _ = job_in_state(State.QUARANTINED, payload=payload)
    response = operator.get("/api/v1/quarantine")
    (entry,) = response.json()["quarantine"]
    assert entry["fingerprint"] == Job.objects.get(pk=job_id).fingerprint
    assert entry["kind"] == "test.noop" and entry["sample_job_id"] == job_id
    assert b"s3cret" not in response.content and b"payload" not in response.content


def test_release_says_how_many_jobs_came_back(operator: Api) -> None:
    payload = unique_payload()
    first, _ = job_in_state(State.QUARANTINED, payload=payload)
    fingerprint = Job.objects.get(pk=first).fingerprint
    response = operator.delete(f"/api/v1/quarantine/{fingerprint}")
    assert response.status_code == 204 and response["X-Released-Jobs"] == "1"
    assert Job.objects.get(pk=first).state == "available"
    again = operator.delete(f"/api/v1/quarantine/{fingerprint}")
    assert again.status_code == 404


def test_the_queue_list_comes_in_pages_that_cost_the_same_however_many_queues(
    operator: Api,
) -> None:
    """A queue costs the list a query or two of its own: with thousands of queue names,
    every call made thousands. A page holds ``limit`` queues by name, and ``next_cursor``
    walks every queue once."""

    def pages(limit: int) -> tuple[list[str], int]:
        names: list[str] = []
        cursor, most = "", 0
        while True:
            with CaptureQueriesContext(connection) as queries:
                body = operator.get(f"/api/v1/queues?limit={limit}{cursor}").json()
            most = max(most, len(queries.captured_queries))
            assert len(body["queues"]) <= limit
            names += [q["name"] for q in body["queues"]]
            if body["next_cursor"] is None:
                return names, most
            cursor = f"&cursor={body['next_cursor']}"

    for i in range(5):
        enqueue_job(queue=f"many-{i:03d}")
    few, few_queries = pages(3)
    for i in range(5, 60):
        enqueue_job(queue=f"many-{i:03d}")
    many, many_queries = pages(3)
    assert many == sorted(set(many)) and set(few) < set(many)
    assert {f"many-{i:03d}" for i in range(60)} <= set(many)
    assert many_queries == few_queries
    assert operator.get("/api/v1/queues?limit=201").status_code == 400
    assert operator.get("/api/v1/queues?cursor=jobs:x").status_code == 400

"""``/jobs``: lists without payloads, filters and cursors, payload reveal, enqueue, verbs."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission, User

from headgate_django import store, testing
from headgate_django.envelope import encode_call
from headgate_django.kernel.states import State
from headgate_django.models import Job
from tests.api.conftest import Api, _api
from tests.conformance.helpers import enqueue_job, job_in_state

pytestmark = pytest.mark.django_db

SECRET = "s3cret-payload-marker"


def secret_job(**kwargs: Any) -> str:
    return enqueue_job(payload=encode_call((), {"card": SECRET}), **kwargs)


def assert_no_payload(content: bytes) -> None:
    encoded = base64.b64encode(encode_call((), {"card": SECRET})).decode()
    assert SECRET.encode() not in content
    assert encoded.encode() not in content
    assert b'"payload"' not in content


def test_list_never_carries_payloads(operator: Api, operator_user: Any) -> None:
    operator_user.user_permissions.add(Permission.objects.get(codename="view_job_payload"))
    operator_user = User.objects.get(pk=operator_user.pk)  # drop the permission cache
    for state in (State.AVAILABLE, State.COMPLETED, State.ARCHIVED, State.UNDECODABLE):
        job_in_state(state, payload=encode_call((), {"card": SECRET}))
    for query in ("", "?include_payload=1", "?q=test", "?state=archived&state=completed"):
        response = _api(operator_user).get(f"/api/v1/jobs{query}")
        assert response.status_code == 200 and response.json()["jobs"]
        assert_no_payload(response.content)


def test_list_filters(operator: Api) -> None:
    a = enqueue_job(queue="mail", kind="test.echo")
    b = enqueue_job(queue="mail", kind="test.noop", pending=True)
    c = enqueue_job(queue="billing", kind="test.noop")

    def ids(**params: Any) -> set[str]:
        response = operator.get("/api/v1/jobs", params)
        assert response.status_code == 200, response.content
        return {j["id"] for j in response.json()["jobs"]}

    assert ids(queue="mail") == {a, b}
    assert ids(kind="test.noop") == {b, c}
    assert ids(state=["pending"]) == {b}
    assert ids(state=["pending", "available"]) == {a, b, c}
    assert ids(q="test.ec") == {a}
    assert ids(q=c[:20]) == {c}
    created = Job.objects.get(pk=b).enqueued_at
    assert b in ids(created_after=(created - timedelta(seconds=1)).isoformat())
    assert b not in ids(created_before=(created - timedelta(seconds=1)).isoformat())
    assert ids(created_after="2099-01-01T00:00:00Z") == set()
    assert ids(finalized_after="2000-01-01T00:00:00Z") == set()


def test_search_is_case_sensitive_on_every_database(operator: Api) -> None:
    """``q`` is a prefix of the id or kind as stored: SQLite's LIKE ignores ASCII case, and
    the same search must not find more there than on PostgreSQL or MariaDB."""
    job = enqueue_job(kind="test.echo")

    def ids(q: str) -> set[str]:
        response = operator.get("/api/v1/jobs", {"q": q})
        assert response.status_code == 200, response.content
        return {j["id"] for j in response.json()["jobs"]}

    assert ids("test.ec") == {job}
    assert ids("TEST.EC") == set()
    assert ids(job[:12]) == {job}
    assert ids(job[:12].lower()) == set()


def test_a_single_valued_filter_given_twice_is_refused(operator: Api) -> None:
    """``?queue=a&queue=b`` names two queues for a filter that takes one: answering with
    the jobs of one of them would be a wrong answer, not a narrower one."""
    enqueue_job(queue="mail")
    for name in ("queue", "kind", "workflow_id", "q", "created_after"):
        first = "mail" if name != "created_after" else "2026-01-01T00:00:00Z"
        response = operator.get(f"/api/v1/jobs?{name}={first}&{name}={first}")
        assert response.status_code == 400, (name, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid_query_parameter"
        assert error["detail"] == {name: [f"give {name} at most once"]}
    response = operator.get("/api/v1/quarantine?kind=a&kind=b")
    assert response.status_code == 400
    assert response.json()["error"]["detail"] == {"kind": ["give kind at most once"]}
    # state is the one list filter: repeating it is how several states are asked for.
    assert operator.get("/api/v1/jobs?state=available&state=pending").status_code == 200


def test_cursor_pages_cover_every_job_once(operator: Api) -> None:
    made = {enqueue_job() for _ in range(7)}
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = operator.get("/api/v1/jobs", params).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(made) and set(seen) == made


def test_detail_reveals_the_payload_only_when_asked_and_allowed(
    viewer: Api, viewer_user: Any
) -> None:
    job_id = secret_job()
    plain = viewer.get(f"/api/v1/jobs/{job_id}")
    assert plain.json()["payload"] is None and plain.json()["payload_size"] > 0
    refused = viewer.get(f"/api/v1/jobs/{job_id}", {"include_payload": "1"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "payload_permission_required"
    viewer_user.user_permissions.add(Permission.objects.get(codename="view_job_payload"))
    shown = _api(User.objects.get(pk=viewer_user.pk)).get(
        f"/api/v1/jobs/{job_id}", {"include_payload": "true"}
    )
    assert base64.b64decode(shown.json()["payload"]) == encode_call((), {"card": SECRET})


def test_create_from_args_and_kwargs(operator: Api) -> None:
    response = operator.post(
        "/api/v1/jobs",
        {"kind": "test.echo", "kwargs": {"value": 3}, "queue": "api", "priority": 5},
    )
    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.kind, job.queue, job.priority, job.state) == ("test.echo", "api", 5, "available")
    assert bytes(job.payload) == encode_call((), {"value": 3})


def test_create_pending_delayed_and_by_payload(operator: Api) -> None:
    pending = operator.post("/api/v1/jobs", {"kind": "test.noop", "pending": True}).json()["id"]
    later = operator.post("/api/v1/jobs", {"kind": "test.noop", "delay_ms": 60000}).json()["id"]
    raw = base64.b64encode(encode_call((), {"value": "raw"})).decode()
    by_payload = operator.post(
        "/api/v1/jobs", {"kind": "test.echo", "payload": raw, "id": "job:custom"}
    ).json()["id"]
    assert Job.objects.get(pk=pending).state == "pending"
    assert Job.objects.get(pk=later).state == "scheduled"
    assert by_payload == "job:custom"
    assert bytes(Job.objects.get(pk="job:custom").payload) == encode_call((), {"value": "raw"})


def test_a_chosen_id_must_be_one_a_route_can_address(operator: Api) -> None:
    """``/jobs/{id}`` cannot match an id with ``/``: refused before anything is stored."""
    refused = operator.post("/api/v1/jobs", {"kind": "test.noop", "id": "import/2026"})
    assert refused.status_code == 400
    assert refused.json()["error"]["detail"] == {"id": ["control characters and / are not allowed"]}
    started = operator.post(
        "/api/v1/durable/executions", {"name": "api-wait", "version": "1", "workflow_id": "a/b"}
    )
    assert started.status_code == 400 and "workflow_id" in started.json()["error"]["detail"]
    assert not Job.objects.exists()


def test_a_job_is_found_by_its_own_id_and_not_by_one_differing_by_case_or_spaces(
    viewer: Api,
) -> None:
    """On every database: MySQL/MariaDB's usual collations took ``order-9`` for the stored
    ``Order-9`` (and ``order-9 `` for ``order-9``)."""
    ids = ("Order-9", "order-9", "order-9 ")
    for job_id in ids[:2]:
        enqueue_job(id=job_id)
    for job_id in ids[:2]:
        assert viewer.get(f"/api/v1/jobs/{quote(job_id)}").json()["id"] == job_id
    for missing in ("ORDER-9", ids[2]):
        assert viewer.get(f"/api/v1/jobs/{quote(missing)}").status_code == 404


def test_create_unknown_kind_is_404(operator: Api) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "not.registered"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_task"


def test_create_with_arguments_the_handler_cannot_take_makes_an_undecodable_job(
    operator: Api,
) -> None:
    response = operator.post("/api/v1/jobs", {"kind": "test.noop", "kwargs": {"user": 1}})
    assert response.status_code == 201
    job_id = response.json()["id"]
    assert testing.run_one() == (job_id, "undecodable")
    assert operator.get(f"/api/v1/jobs/{job_id}").json()["state"] == "undecodable"


def test_operator_verbs_move_jobs(operator: Api) -> None:
    pending = enqueue_job(pending=True)
    body = {"scheduled_at": "2099-01-01T00:00:00Z"}
    moved = operator.post(f"/api/v1/jobs/{pending}/reschedule", body).json()
    assert moved["state"] == "scheduled" and moved["scheduled_at"].startswith("2099-01-01")
    assert operator.post(f"/api/v1/jobs/{pending}/promote").json()["state"] == "available"
    assert operator.post(f"/api/v1/jobs/{pending}/cancel").json()["state"] == "cancelled"
    assert operator.post(f"/api/v1/jobs/{pending}/retry").json()["state"] == "available"
    assert operator.delete(f"/api/v1/jobs/{pending}").status_code == 204
    assert not Job.objects.filter(pk=pending).exists()


def test_reschedule_needs_exactly_one_of_instant_or_delay(operator: Api) -> None:
    job_id = enqueue_job(pending=True)
    response = operator.post(f"/api/v1/jobs/{job_id}/reschedule", {})
    assert response.status_code == 400
    both = {"delay_ms": 1, "scheduled_at": "2099-01-01T00:00:00Z"}
    assert operator.post(f"/api/v1/jobs/{job_id}/reschedule", both).status_code == 400


def test_replace_payload_then_retry(operator: Api) -> None:
    job_id, _ = job_in_state(State.UNDECODABLE)
    fixed = base64.b64encode(encode_call((), {"fixed": True})).decode()
    response = operator.put(
        f"/api/v1/jobs/{job_id}/payload", {"payload": fixed, "schema_version": 3}
    )
    assert response.status_code == 200 and response.json()["schema_version"] == 3
    assert bytes(Job.objects.get(pk=job_id).payload) == encode_call((), {"fixed": True})
    assert operator.post(f"/api/v1/jobs/{job_id}/retry").json()["state"] == "available"


def test_explicit_reads(operator: Api) -> None:
    done, _ = job_in_state(State.COMPLETED)
    assert operator.get(f"/api/v1/jobs/{done}/result").json() == {"result": {"ok": True}}
    waiting = enqueue_job()
    missing = operator.get(f"/api/v1/jobs/{waiting}/result")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "no_result"
    job_id, claimed = job_in_state(State.RUNNING)
    assert claimed is not None
    store.job_save_progress(claimed.ref, {"done": 3, "total": 10})
    store.job_set_cursor(claimed.ref, b"page-4", {"import": {"cursor": True}})
    assert operator.get(f"/api/v1/jobs/{job_id}/progress").json() == {
        "progress": {"done": 3, "total": 10}
    }
    checkpoint = operator.get(f"/api/v1/jobs/{job_id}/checkpoint").json()
    assert base64.b64decode(checkpoint["cursor"]) == b"page-4"


def test_counts_by_state(operator: Api) -> None:
    enqueue_job(queue="a")
    enqueue_job(queue="a", pending=True)
    enqueue_job(queue="b")
    everything = operator.get("/api/v1/jobs/counts").json()
    assert everything["counts"]["available"] == 2 and everything["total"] == 3
    assert set(everything["counts"]) == {s.value for s in State if s is not State.DELETED}
    only_a = operator.get("/api/v1/jobs/counts", {"queue": "a"}).json()
    assert (only_a["counts"]["pending"], only_a["total"]) == (1, 2)


@pytest.mark.parametrize(
    ("state", "finished"),
    [
        (State.COMPLETED, True),
        (State.CANCELLED, True),
        (State.QUARANTINED, False),
        (State.UNDECODABLE, False),
    ],
)
def test_a_refused_job_cancel_names_the_state(operator: Api, state: State, finished: bool) -> None:
    """A quarantined or undecodable job has not finished: the 409 says what it is, not
    that it "has already finished"."""
    job_id, _ = job_in_state(state)
    response = operator.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "invalid_transition"
    assert error["detail"] == {"id": job_id, "state": state.value}
    assert ("finished" in error["message"]) is finished
    assert state.value in error["message"]


def test_promote_takes_a_retryable_job_too(operator: Api) -> None:
    job_id, _ = job_in_state(State.RETRYABLE)
    response = operator.post(f"/api/v1/jobs/{job_id}/promote")
    assert (response.status_code, response.json()["state"]) == (200, "available")

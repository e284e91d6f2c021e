"""``/durable/executions/{id}/queries/{name}`` and ``…/updates/{name}[/{update_id}]``: the
routes over ``Manager.query`` / ``update`` / ``get_update``, their permissions, redaction,
the Idempotency-Key as update id, and the error envelope for bad input."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import durable, testing
from headgate_django.models import HistoryEvent
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def waiting(workflow_id: str = "h:1") -> str:
    durable.Client().start("api-wait", "1", {"n": 1}, workflow_id=workflow_id)
    testing.run_jobs()
    return f"/api/v1/durable/executions/{workflow_id}"


def events(workflow_id: str = "h:1") -> int:
    return HistoryEvent.objects.filter(execution_id=workflow_id).count()


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_query_with_arguments_and_redaction(operator: Api, blind_operator: Api) -> None:
    base = waiting()
    before = events()
    answer = operator.get(f"{base}/queries/notes", {"arg": ["3", "tea", '"3"']})
    assert answer.status_code == 200
    assert answer.json() == {"query": "notes", "result": [3, "tea", "3"], "redacted": False}
    hidden = blind_operator.get(f"{base}/queries/notes")
    assert hidden.status_code == 200
    assert hidden.json() == {"query": "notes", "result": None, "redacted": True}
    assert events() == before


def test_update_then_poll_then_repeat(operator: Api) -> None:
    base = waiting()
    sent = operator.post(f"{base}/updates/note", {"payload": "hello"}, key="k-1")
    assert sent.status_code == 202
    assert sent.json() == {
        "workflow_id": "h:1",
        "update_id": "k-1",  # the Idempotency-Key
        "name": "note",
        "state": "accepted",
        "result": None,
        "error": None,
        "deduplicated": False,
        "redacted": False,
    }
    assert operator.get(f"{base}/updates/note/k-1").json()["state"] == "accepted"
    waiting_again = operator.post(f"{base}/updates/note", {"payload": "hello", "update_id": "k-1"})
    assert waiting_again.status_code == 202 and waiting_again.json()["deduplicated"] is True
    testing.run_jobs()
    done = operator.get(f"{base}/updates/note/k-1").json()
    assert (done["state"], done["result"]) == ("succeeded", 1)
    assert operator.get(f"{base}/queries/notes").json()["result"] == ["hello"]
    # Another request with the same update id: the first outcome, nothing recorded again.
    before = events()
    again = operator.post(f"{base}/updates/note", {"payload": "hello", "update_id": "k-1"})
    assert again.status_code == 200
    assert (again.json()["result"], again.json()["deduplicated"]) == (1, True)
    assert events() == before


def test_bad_queries_and_updates_get_the_error_envelope(operator: Api) -> None:
    base = waiting()
    before = events()
    assert code(operator.get(f"{base}/queries/nope")) == "unknown_handler"
    assert operator.get(f"{base}/queries/nope").status_code == 404
    assert operator.get("/api/v1/durable/executions/missing/queries/notes").status_code == 404
    assert operator.get(f"{base}/queries/notes", {"arg": ""}).status_code == 400
    rejected = operator.post(f"{base}/updates/note", {"payload": "  "})
    assert (rejected.status_code, code(rejected)) == (422, "update_rejected")
    unknown = operator.post(f"{base}/updates/remove", {"payload": 1})
    assert (unknown.status_code, code(unknown)) == (404, "unknown_handler")
    large = operator.post(f"{base}/updates/note", {"payload": "x" * (1024 * 1024)})
    assert (large.status_code, code(large)) == (413, "payload_too_large")
    unkeyed = operator.post(f"{base}/updates/note", {"payload": "hi"}, key=None)
    assert code(unkeyed) == "idempotency_key_required"
    extra = operator.post(f"{base}/updates/note", {"payload": "hi", "wait": 3})
    assert extra.status_code == 400
    assert operator.get(f"{base}/updates/note/never").status_code == 404
    assert events() == before
    durable.Manager().cancel("h:1")
    finished = operator.post(f"{base}/updates/note", {"payload": "late"})
    assert (finished.status_code, code(finished)) == (409, "invalid_transition")
    # Queries on a finished execution answer with its state at the end.
    assert operator.get(f"{base}/queries/notes").status_code == 200


def test_a_query_argument_nested_too_deeply_is_a_400(operator: Api) -> None:
    # json.loads ran out of stack: a RecursionError, answered with a 500.
    base = waiting()
    deep = "[" * 100_000 + "]" * 100_000
    response = operator.get(f"{base}/queries/notes", {"arg": deep})
    assert (response.status_code, code(response)) == (400, "invalid_query_parameter")
    assert response.json()["error"]["detail"] == {
        "arg": ["arg is nested too deeply to read as JSON"]
    }


def test_update_detail_names_its_update(operator: Api) -> None:
    base = waiting()
    durable.Manager().update("h:1", "note", "hi", update_id="u-1", wait=False)
    assert operator.get(f"{base}/updates/note/u-1").status_code == 200
    assert operator.get(f"{base}/updates/other/u-1").status_code == 404


def test_permissions(viewer: Api) -> None:
    base = waiting()
    assert viewer.get(f"{base}/queries/notes").status_code == 200
    assert viewer.post(f"{base}/updates/note", {"payload": "hi"}).status_code == 403

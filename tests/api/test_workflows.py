"""``/workflows``: ids with ``:`` (plain and percent-encoded), payload-free reads, grafts,
cancel, and the bounded list."""

from __future__ import annotations

import pytest

from headgate_django import enqueue, testing
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow
from tests.api.conftest import Api, onboarding_workflow
from tests.app import tasks

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("spelling", ["onboarding:42", "onboarding%3A42", "onboarding%3a42"])
def test_ids_with_a_colon_in_both_spellings(operator: Api, onboarding: str, spelling: str) -> None:
    response = operator.get(f"/api/v1/workflows/{spelling}")
    assert response.status_code == 200
    snapshot = response.json()
    assert snapshot["workflow_id"] == "onboarding:42"
    assert snapshot["coordinator_job_id"] == "onboarding:42:coordinator"
    assert [n["name"] for n in snapshot["nodes"]] == ["prepare", "approval", "welcome"]
    assert b"payload" not in response.content


def test_node_and_edges(operator: Api, onboarding: str) -> None:
    node = operator.get("/api/v1/workflows/onboarding%3A42/nodes/approval").json()
    assert (node["kind"], node["signal"], node["state"]) == ("signal", "approved", "pending")
    assert node["dependencies"] == ["prepare"] and node["dependents"] == ["welcome"]
    deps = operator.get("/api/v1/workflows/onboarding:42/nodes/welcome/dependencies").json()
    assert deps == {"dependencies": ["approval"]}
    dependents = operator.get("/api/v1/workflows/onboarding:42/nodes/prepare/dependents").json()
    assert dependents == {"dependents": ["approval"]}
    missing = operator.get("/api/v1/workflows/onboarding:42/nodes/nope")
    assert missing.status_code == 404
    assert operator.get("/api/v1/workflows/nope:1").status_code == 404


def test_events_after_a_run(operator: Api, onboarding: str) -> None:
    operator.post("/api/v1/workflows/onboarding:42/signals", {"signal": "approved"})
    testing.run_jobs()
    events = operator.get("/api/v1/workflows/onboarding:42/events").json()["events"]
    assert events[0]["event"] == "workflow_started"
    assert events[-1]["event"] == "workflow_succeeded"


def test_unknown_signal_is_refused(operator: Api, onboarding: str) -> None:
    response = operator.post("/api/v1/workflows/onboarding:42/signals", {"signal": "nope"})
    assert response.status_code == 422


def test_graft_then_complete(operator: Api) -> None:
    enqueue(
        Workflow("g:1")
        .add("a", tasks.echo.envelope(value=1), [])
        .add_signal("s", "go", ["a"])
        .prepare()
    )
    testing.run_jobs()
    body = {
        "expected_revision": 1,
        "tasks": [{"name": "b", "kind": "test.echo", "kwargs": {"value": 2}, "deps": ["a"]}],
    }
    response = operator.post("/api/v1/workflows/g:1/grafts", body)
    assert response.status_code == 202, response.content
    assert response.json() == {"receipt_id": "g:1:graft:2", "revision": 2}
    testing.run_jobs(include_scheduled=True)
    operator.post("/api/v1/workflows/g:1/signals", {"signal": "go"})
    testing.run_jobs(include_scheduled=True)
    snapshot = inspect_workflow("g:1")
    assert snapshot.revision == 2 and snapshot.node("b").state == "completed"
    assert snapshot.coordinator_state == "completed"


def test_graft_that_would_add_a_cycle_is_422_naming_it(operator: Api) -> None:
    enqueue(
        Workflow("g:1").add("a", tasks.echo.envelope(), []).add_signal("s", "go", ["a"]).prepare()
    )
    testing.run_jobs()
    body = {
        "expected_revision": 1,
        "tasks": [
            {"name": "b", "kind": "test.echo", "deps": ["a", "c"]},
            {"name": "c", "kind": "test.echo", "deps": ["b"]},
        ],
    }
    response = operator.post("/api/v1/workflows/g:1/grafts", body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "graph_cycle"
    assert sorted(set(error["detail"]["cycle"])) == ["b", "c"]
    assert "b -> c" in error["message"] or "c -> b" in error["message"]
    assert not Job.objects.filter(pk__in=["g:1:graft:2", "g:1:b", "g:1:c"]).exists()


def test_graft_at_a_stale_revision_is_409(operator: Api, onboarding: str) -> None:
    body = {"expected_revision": 3, "tasks": [{"name": "x", "kind": "test.echo"}]}
    response = operator.post("/api/v1/workflows/onboarding:42/grafts", body)
    assert response.status_code == 409
    assert response.json()["error"]["detail"]["current_revision"] == 1


def test_graft_with_an_unknown_kind_is_404(operator: Api, onboarding: str) -> None:
    body = {"expected_revision": 1, "tasks": [{"name": "x", "kind": "not.registered"}]}
    response = operator.post("/api/v1/workflows/onboarding:42/grafts", body)
    assert response.status_code == 404


def test_cancel_stops_every_live_node(operator: Api, onboarding: str) -> None:
    response = operator.post("/api/v1/workflows/onboarding%3A42/cancel", {})
    assert response.status_code == 200
    assert response.json() == {"jobs": 4, "workflows": 1}
    assert inspect_workflow("onboarding:42").coordinator_state == "cancelled"


def test_retry_of_a_running_workflow_is_a_conflict(operator: Api) -> None:
    enqueue(Workflow("r:2").failed_subgraph_retry().add("a", tasks.noop.envelope(), []).prepare())
    response = operator.post("/api/v1/workflows/r:2/retry", {"expected_revision": 1})
    assert response.status_code == 409


def test_list_is_cursor_paginated(operator: Api) -> None:
    for n in range(5):
        onboarding_workflow(f"wf:{n}")
    first = operator.get("/api/v1/workflows", {"limit": 2}).json()
    assert [w["workflow_id"] for w in first["workflows"]] == ["wf:0", "wf:1"]
    assert first["workflows"][0]["state"] == "available"
    rest = operator.get("/api/v1/workflows", {"limit": 200, "cursor": first["next_cursor"]})
    assert [w["workflow_id"] for w in rest.json()["workflows"]] == ["wf:2", "wf:3", "wf:4"]
    assert rest.json()["next_cursor"] is None

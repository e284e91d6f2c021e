"""``/durable/executions``: start (deduplicated by business key), list without input,
history in the replay-checker format, signals keyed by the Idempotency-Key, operator verbs."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import durable, testing
from headgate_django.kernel.replay_events import history_from_json
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def start(api: Api, **body: Any) -> Any:
    return api.post("/api/v1/durable/executions", {"name": "api-wait", "version": "1", **body})


def test_start_then_deduplicate_by_business_key(operator: Api) -> None:
    first = start(operator, input={"order": 42}, business_idempotency_key="order:42")
    assert first.status_code == 201
    assert first.json()["deduplicated"] is False
    again = start(operator, input={"order": 42}, business_idempotency_key="order:42")
    assert again.status_code == 200
    assert again.json() == {"workflow_id": first.json()["workflow_id"], "deduplicated": True}


def test_start_an_unknown_workflow_is_422(operator: Api) -> None:
    response = operator.post("/api/v1/durable/executions", {"name": "nope", "version": "1"})
    assert response.status_code == 422


def test_signal_then_result(operator: Api) -> None:
    wf = start(operator, input="o-1", workflow_id="exec:1").json()["workflow_id"]
    assert wf == "exec:1"
    testing.run_jobs()
    path = "/api/v1/durable/executions/exec%3A1"
    assert operator.get(path).json()["state"] == "running"
    sent = operator.post(f"{path}/signal", {"name": "go", "payload": "now"}, key="go-1")
    assert sent.json() == {"delivered": True}
    # The key doubles as message_id: the same signal under the same key is not delivered
    # twice, even once the API's own response record is gone.
    from headgate_django.models import IdempotencyRecord

    IdempotencyRecord.objects.all().delete()
    repeat = operator.post(f"{path}/signal", {"name": "go", "payload": "now"}, key="go-1")
    assert repeat.json() == {"delivered": False}
    testing.run_jobs()
    view = operator.get(path).json()
    assert view["state"] == "succeeded" and view["result"] == {"order": "o-1", "go": "now"}


def test_list_is_filtered_paginated_and_input_free(operator: Api) -> None:
    for n in range(3):
        start(operator, input={"card": "s3cret"}, workflow_id=f"e:{n}")
    durable.Manager().cancel("e:1")
    page = operator.get("/api/v1/durable/executions", {"limit": 2})
    assert [e["id"] for e in page.json()["executions"]] == ["e:0", "e:1"]
    assert b"s3cret" not in page.content
    rest = operator.get("/api/v1/durable/executions", {"cursor": page.json()["next_cursor"]})
    assert [e["id"] for e in rest.json()["executions"]] == ["e:2"]
    running = operator.get("/api/v1/durable/executions", {"state": "running"}).json()
    assert [e["id"] for e in running["executions"]] == ["e:0", "e:2"]


def test_history_is_the_replay_checker_format(operator: Api) -> None:
    wf = start(operator, input=1).json()["workflow_id"]
    response = operator.get(f"/api/v1/durable/executions/{wf}/history")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.content.decode() == durable.Manager().history(wf)
    export = history_from_json(response.content)
    assert export.events[0].type == "WorkflowStarted"


def test_suspend_resume_cancel(operator: Api) -> None:
    wf = start(operator).json()["workflow_id"]
    base = f"/api/v1/durable/executions/{wf}"
    suspended = operator.post(f"{base}/suspend", {"reason": "maintenance"}).json()
    assert suspended["state"] == "suspended" and suspended["suspended_reason"] == "maintenance"
    assert operator.post(f"{base}/resume").json()["state"] == "running"
    assert operator.post(f"{base}/cancel", {}).json()["state"] == "cancelled"
    again = operator.post(f"{base}/cancel", {})
    assert again.status_code == 409


def test_resolve_uncertain(operator: Api) -> None:
    wf = operator.post("/api/v1/durable/executions", {"name": "api-unsure", "version": "1"}).json()[
        "workflow_id"
    ]
    for _ in range(5):
        testing.run_jobs()
    base = f"/api/v1/durable/executions/{wf}"
    assert operator.get(base).json()["state"] == "suspended"
    foreign = operator.post(
        f"{base}/resolve-uncertain", {"job_id": "other:op:1", "decision": "retry"}
    )
    assert foreign.status_code == 404
    # an execution whose id extends this one's: its Operations are not this one's
    other = start(operator, name="api-unsure", workflow_id=f"{wf}:op:x").json()["workflow_id"]
    for _ in range(5):
        testing.run_jobs()
    assert operator.get(f"/api/v1/durable/executions/{other}").json()["state"] == "suspended"
    for job_id in (f"{other}:op:1", f"{wf}:x", f"{wf}"):
        refused = operator.post(
            f"{base}/resolve-uncertain", {"job_id": job_id, "decision": "retry"}
        )
        assert refused.status_code == 404, job_id
    assert operator.get(f"/api/v1/durable/executions/{other}").json()["state"] == "suspended"
    neither = operator.post(f"{base}/resolve-uncertain", {"decision": "retry"})
    assert neither.status_code == 400
    nested: Any = "paid"
    for _ in range(30):  # more than MariaDB keeps in a JSON column: it was a 500 there
        nested = [nested]
    too_deep = operator.post(
        f"{base}/resolve-uncertain",
        {"command_id": "op:1", "decision": "complete", "result": nested},
    )
    assert too_deep.status_code == 422, too_deep.content
    assert too_deep.json()["error"]["code"] == "invalid_payload"
    assert operator.get(base).json()["state"] == "suspended"
    done = operator.post(
        f"{base}/resolve-uncertain",
        {"command_id": "op:1", "decision": "complete", "result": "paid"},
    )
    assert done.status_code == 200 and done.json()["state"] == "running"
    testing.run_jobs()
    assert operator.get(base).json()["result"] == "paid"


def test_the_chain_of_runs_and_the_history_of_each(operator: Api) -> None:
    wf = start(operator, name="api-loop", input=1).json()["workflow_id"]
    testing.run_jobs()
    base = f"/api/v1/durable/executions/{wf}"
    body = operator.get(base).json()
    assert (body["state"], body["result"], body["run_number"]) == ("succeeded", 3, 3)
    assert body["history_warning"] == ""
    runs = body["runs"]
    assert [(r["number"], r["current"]) for r in runs] == [(1, False), (2, False), (3, True)]
    assert runs[0]["run_id"] == wf and runs[-1]["run_id"] == body["run_id"]
    assert runs[-1]["finished_at"] is None and runs[0]["events"] == 2
    first = operator.get(f"{base}/history", {"run_id": wf})
    assert first.content.decode() == durable.Manager().history(wf, wf)
    export = history_from_json(first.content)
    assert [e.type for e in export.events] == ["WorkflowStarted", "WorkflowContinuedAsNew"]
    second = history_from_json(
        operator.get(f"{base}/history", {"run_id": runs[1]["run_id"]}).content
    )
    assert second.run_id == runs[1]["run_id"] and second.input == 2
    current = operator.get(f"{base}/history").content
    assert history_from_json(current).run_id == body["run_id"]
    missing = operator.get(f"{base}/history", {"run_id": "nope"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_signal_with_start_starts_once_then_signals_the_live_execution(operator: Api) -> None:
    path = "/api/v1/durable/executions/signal-with-start"
    body = {
        "name": "api-wait",
        "version": "1",
        "input": "o-7",
        "business_idempotency_key": "order:7",
        "signal": "go",
        "payload": "first",
    }
    first = operator.post(path, body, key="sws-1")
    assert first.status_code == 201
    wf = first.json()["workflow_id"]
    assert first.json() == {"workflow_id": wf, "started": True, "delivered": True}
    again = operator.post(path, {**body, "payload": "second"}, key="sws-2")
    assert again.status_code == 200
    assert again.json() == {"workflow_id": wf, "started": False, "delivered": True}
    # The Idempotency-Key doubles as message_id, as for the signal route.
    from headgate_django.models import IdempotencyRecord

    IdempotencyRecord.objects.all().delete()
    repeat = operator.post(path, {**body, "payload": "second"}, key="sws-2")
    assert repeat.json() == {"workflow_id": wf, "started": False, "delivered": False}
    testing.run_jobs()
    view = operator.get(f"/api/v1/durable/executions/{wf}").json()
    assert view["result"] == {"order": "o-7", "go": "first"}


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"name": "nope"}, 422, "invalid_definition"),
        ({"version": "9"}, 422, "invalid_definition"),
        ({"business_idempotency_key": None}, 400, "invalid"),
        ({"signal": ""}, 400, "invalid"),
    ],
)
def test_signal_with_start_refuses_bad_input_and_writes_nothing(
    operator: Api, change: dict[str, Any], status: int, code: str
) -> None:
    from tests.durable.helpers import counts

    body = {
        "name": "api-wait",
        "version": "1",
        "business_idempotency_key": "order:8",
        "signal": "go",
        **change,
    }
    before = counts()
    response = operator.post("/api/v1/durable/executions/signal-with-start", body)
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    assert counts() == before


def test_the_execution_view_shows_parent_and_children(operator: Api) -> None:
    wf = durable.Client().start("api-parent", "1", None, workflow_id="p:1").workflow_id
    for _ in range(3):
        testing.run_jobs()
    parent = operator.get("/api/v1/durable/executions/p%3A1").json()
    assert parent["parent_id"] is None
    assert parent["children"] == [
        {
            "id": f"{wf}:child:1",
            "name": "api-wait",
            "version": "1",
            "state": "running",
            "command_id": "child:1",
            "parent_close_policy": "terminate",
        }
    ]
    child = operator.get("/api/v1/durable/executions/p%3A1%3Achild%3A1").json()
    assert child["parent_id"] == wf
    assert child["children"] == []


# -- values over HEADGATE["MAX_PAYLOAD_BYTES"]: 413, nothing written ---------------------


def too_large(response: Any, message: str) -> None:
    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert f"{message}, over the 1000-byte limit" in error["message"]
    assert error["detail"]["limit"] == 1000


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input": "x" * 999}, "the start's input is 1001 bytes"),
        ({"meta": {"m": "x" * 999}}, "the start's meta is 1007 bytes"),
    ],
)
def test_a_start_over_the_payload_limit_is_413_and_writes_nothing(
    operator: Api, settings: Any, body: dict[str, Any], message: str
) -> None:
    from headgate_django.models import Execution
    from tests.durable.helpers import counts

    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    before = counts()
    too_large(start(operator, workflow_id="big:1", **body), message)
    assert counts() == before
    assert not Execution.objects.filter(pk="big:1").exists()


def test_a_signal_over_the_payload_limit_is_413_and_writes_nothing(
    operator: Api, settings: Any
) -> None:
    from headgate_django.models import SignalInbox
    from tests.durable.helpers import counts

    wf = start(operator, input="o-1", workflow_id="big:2").json()["workflow_id"]
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    before = counts()
    path = f"/api/v1/durable/executions/{wf}"
    sent = operator.post(f"{path}/signal", {"name": "go", "payload": "x" * 999})
    too_large(sent, "the payload of signal 'go' is 1001 bytes")
    sws = {"name": "api-wait", "version": "1", "business_idempotency_key": "order:9"}
    for body, message in [
        ({"input": "x" * 999, "signal": "go"}, "the start's input is 1001 bytes"),
        ({"signal": "go", "payload": "x" * 999}, "the payload of signal 'go' is 1001 bytes"),
    ]:
        response = operator.post("/api/v1/durable/executions/signal-with-start", {**sws, **body})
        too_large(response, message)
    assert counts() == before
    assert not SignalInbox.objects.filter(workflow_id=wf).exists()

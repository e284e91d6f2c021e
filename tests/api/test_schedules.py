"""``/schedules``: upsert from a body shaped like a HEADGATE["SCHEDULES"] entry, bad input
refused in the error envelope with nothing written, run deduplicated by Idempotency-Key."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django.models import Job, Schedule, ScheduleEvent
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db

PATH = "/api/v1/schedules/nightly"


def test_upsert_read_and_list(operator: Api) -> None:
    body = {"spec": "30 2 * * *", "tz": "Europe/Berlin", "task": "test.echo", "kwargs": {"v": 1}}
    created = operator.put(PATH, body)
    assert created.status_code == 200, created.content
    data = created.json()
    assert (data["name"], data["target_type"], data["target_name"]) == (
        "nightly",
        "task",
        "test.echo",
    )
    assert len(data["next_runs"]) == 5 and data["next_runs"][0] == data["next_run_at"]
    assert "payload" not in str(data)
    again = operator.put(PATH, {**body, "on_missed": "backfill"}).json()
    assert again["next_run_at"] == data["next_run_at"]  # the same spec keeps its phase
    listed = operator.get("/api/v1/schedules").json()["schedules"]
    assert [s["name"] for s in listed] == ["nightly"] and listed[0]["on_missed"] == "backfill"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"spec": "61 * * * *", "task": "test.echo"}, "invalid_schedule"),
        ({"spec": "@hourly", "tz": "Nowhere/Land", "task": "test.echo"}, "invalid_schedule"),
        ({"spec": "0 3 * * *", "tz": "America", "task": "test.echo"}, "invalid_schedule"),
        ({"spec": "@every 0s", "task": "test.echo"}, "invalid_schedule"),
        ({"spec": "@hourly", "task": "no.such.task"}, "invalid_schedule"),
        ({"spec": "@hourly"}, "invalid_schedule"),
        ({"spec": "@hourly", "task": "test.echo", "backfill_limit": -1}, "invalid"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(operator: Api, body: dict, code: str) -> None:
    response = operator.put(PATH, body)
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"] == code
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"task": "test.echo", "kwargs": {"value": "x" * 1000}},
            "the payload (args and kwargs) of task target 'test.echo' is 1033 bytes",
        ),
        (
            {"task": "test.echo", "args": ["x" * 1000]},
            "the payload (args and kwargs) of task target 'test.echo' is 1025 bytes",
        ),
        (
            {"durable": {"name": "api-wait", "version": "1", "input": "x" * 999}},
            "the input of durable target 'api-wait' is 1001 bytes",
        ),
    ],
)
def test_a_target_over_the_payload_limit_is_413_and_writes_nothing(
    operator: Api, settings: Any, body: dict[str, Any], message: str
) -> None:
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    response = operator.put(PATH, {"spec": "@hourly", **body})
    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert error["message"].startswith(f"{message}, over the 1000-byte limit")
    assert error["detail"] == {"size": int(message.split()[-2]), "limit": 1000}
    assert not Schedule.objects.exists()


def test_run_is_deduplicated_by_its_idempotency_key(operator: Api) -> None:
    operator.put(PATH, {"spec": "@hourly", "task": "test.echo"})
    first = operator.post(f"{PATH}/run", key="run-once")
    again = operator.post(f"{PATH}/run", key="run-once")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert list(Job.objects.values_list("id", flat=True)) == [first.json()["id"]]
    events = operator.get(f"{PATH}/events").json()["events"]
    assert [(e["outcome"], e["target_id"]) for e in events] == [("enqueued", first.json()["id"])]


def test_pause_resume_delete_and_unknown(operator: Api) -> None:
    operator.put(PATH, {"spec": "@hourly", "task": "test.echo"})
    assert operator.post(f"{PATH}/pause").json()["paused"] is True
    assert operator.post(f"{PATH}/resume").json()["paused"] is False
    operator.post(f"{PATH}/run")
    assert operator.delete(PATH).status_code == 204
    assert operator.get(PATH).status_code == 404
    assert operator.get(PATH).json()["error"]["code"] == "not_found"
    assert ScheduleEvent.objects.filter(schedule_name="nightly").count() == 1


DECLARED = {"nightly": {"task": "test.echo", "spec": "0 3 * * *", "kwargs": {"v": 1}}}


def test_a_declared_schedule_is_the_settings_to_change(operator: Api) -> None:
    """PUT and DELETE of a schedule in HEADGATE["SCHEDULES"] are refused with 409 naming
    the settings key (the next worker start would undo them); pause, resume and run work,
    and the schedule stays declared. Once gone from the settings it is the API's."""
    from django.test import override_settings

    from headgate_django import schedules

    with override_settings(HEADGATE={"SCHEDULES": DECLARED}):
        schedules.sync_declared()
        before = Schedule.objects.values().get(name="nightly")
        for response in (
            operator.put(PATH, {"spec": "@hourly", "task": "test.echo"}),
            operator.delete(PATH),
        ):
            assert response.status_code == 409, response.content
            error = response.json()["error"]
            assert error["code"] == "declared_schedule"
            assert "HEADGATE['SCHEDULES']['nightly']" in error["message"]
        assert Schedule.objects.values().get(name="nightly") == before
        assert operator.post(f"{PATH}/pause").json()["paused"] is True
        assert operator.post(f"{PATH}/resume").json()["paused"] is False
        assert operator.post(f"{PATH}/run").status_code == 201
        assert Schedule.objects.get(name="nightly").declared
    with override_settings(HEADGATE={"SCHEDULES": {}}):
        schedules.sync_declared()  # no longer declared: paused, and the API's to change
        replaced = operator.put(PATH, {"spec": "@hourly", "task": "test.echo"})
        assert replaced.status_code == 200, replaced.content
        assert not Schedule.objects.get(name="nightly").declared


def test_a_task_target_is_a_registered_kind_and_no_module_is_imported(operator: Api) -> None:
    """The API takes a task's kind, never an import path: importing the module a caller
    names would run that module's code in the server, whatever the answer then is."""
    import sys

    probe = "tests.api.import_probe"
    sys.modules.pop(probe, None)
    response = operator.put(PATH, {"spec": "@hourly", "task": f"{probe}.anything"})
    assert probe not in sys.modules
    assert response.status_code == 422, response.content
    assert response.json()["error"]["message"] == (
        f"schedule 'nightly': no task has the kind '{probe}.anything'"
    )
    assert not Schedule.objects.exists()


def test_a_run_the_store_refuses_is_answered_with_the_refusal_not_a_500(operator: Api) -> None:
    """A quarantined task's run is the store's 423 ``quarantined``, as an enqueue of it
    is (a client tells it from a server fault); nothing of the run is kept."""
    from headgate_django.models import Quarantine
    from headgate_django.store import db_now
    from tests.app import tasks

    operator.put(PATH, {"spec": "@hourly", "task": "test.echo"})
    poison = tasks.echo.envelope()
    Quarantine.objects.create(
        fingerprint=poison.fingerprint, kind=poison.kind, quarantined_at=db_now()
    )
    response = operator.post(f"{PATH}/run")
    assert response.status_code == 423, response.content
    assert response.json()["error"]["code"] == "quarantined"
    assert not Job.objects.exists()


def test_the_list_is_paginated_by_name_like_the_other_lists(operator: Api) -> None:
    for name in ("c", "a", "b"):
        operator.put(f"/api/v1/schedules/{name}", {"spec": "@hourly", "task": "test.echo"})
    first = operator.get("/api/v1/schedules?limit=2").json()
    assert [s["name"] for s in first["schedules"]] == ["a", "b"]
    assert first["next_cursor"] == "b"
    rest = operator.get(f"/api/v1/schedules?limit=2&cursor={first['next_cursor']}").json()
    assert [s["name"] for s in rest["schedules"]] == ["c"] and rest["next_cursor"] is None
    whole = operator.get("/api/v1/schedules").json()
    assert len(whole["schedules"]) == 3 and whole["next_cursor"] is None
    for bad in ("limit=0", "limit=201", "limit=x", "cursor="):
        response = operator.get(f"/api/v1/schedules?{bad}")
        assert response.status_code == 400, (bad, response.content)
        assert response.json()["error"]["code"] == "invalid_query_parameter"


def test_the_list_schema_states_its_cursor_limit_and_next_cursor(viewer: Api) -> None:
    operation = viewer.get("/api/v1/schema/").json()["paths"]["/api/v1/schedules"]["get"]
    params = {p["name"]: p["schema"] for p in operation["parameters"]}
    assert params["limit"]["minimum"] == 1 and params["limit"]["maximum"] == 200
    assert params["limit"]["default"] == 50 and "cursor" in params
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    component = viewer.get("/api/v1/schema/").json()["components"]["schemas"][ref.split("/")[-1]]
    assert set(component["required"]) >= {"schedules", "next_cursor"}
    assert component["properties"]["next_cursor"]["nullable"] is True


def test_a_schedule_that_cannot_be_planned_is_read_with_the_reason(operator: Api) -> None:
    """A stored spec this server cannot plan (its zone gone from the tz database, a row
    written by hand) is still read: 200, next_run_at null, no next runs, and why."""
    from headgate_django.schedules.scheduler import run_pass
    from headgate_django.store import db_now

    operator.put(PATH, {"spec": "@hourly", "task": "test.echo"})
    Schedule.objects.filter(name="nightly").update(spec="0 3 * * *", timezone="Mars/Olympus")
    why = "unknown time zone 'Mars/Olympus'"
    response = operator.get(PATH)
    assert response.status_code == 200, response.content
    data = response.json()
    assert (data["next_run_at"], data["next_runs"], data["plan_error"]) == (None, [], why)
    assert operator.get("/api/v1/schedules").json()["schedules"][0]["plan_error"] == why
    Schedule.objects.filter(name="nightly").update(next_run_at=db_now())
    assert run_pass() == {"parked": 1}
    data = operator.get(PATH).json()
    assert (data["next_run_at"], data["next_runs"], data["plan_error"]) == (None, [], why)
    (event,) = operator.get(f"{PATH}/events").json()["events"]
    assert (event["outcome"], event["reason"]) == ("parked", f"cannot be planned: {why}")
    edited = operator.put(PATH, {"spec": "@hourly", "task": "test.echo"}).json()
    assert edited["plan_error"] is None and edited["next_run_at"] is not None
    assert operator.get("/api/v1/schedules").json()["schedules"][0]["plan_error"] is None

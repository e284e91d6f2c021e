"""``/workers``: the registry, paged by id, filtered by status, strict about its parameters,
readable only with ``view_worker``."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from headgate_django.models import Worker
from headgate_django.store.workers import Beat, worker_heartbeat
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db


def register(worker_id: str, *, heartbeat: float = 5.0, stopped: bool = False, **kw) -> None:
    beat = Beat(
        worker_id, "host-a", 42, kw.pop("queues", None), 4, timedelta(seconds=heartbeat), **kw
    )
    worker_heartbeat(beat, stopped=stopped)


def test_list_and_read_one(viewer: Api) -> None:
    register("w-1", in_flight=2, in_flight_by_queue={"default": 2}, claimed=9, completed=7)
    register("w-2", queues=["emails"], stopped=True)
    register("w-3", heartbeat=0.01)
    time.sleep(0.05)  # w-3 misses three beats
    response = viewer.get("/api/v1/workers")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["next_cursor"] is None
    assert [(w["id"], w["status"]) for w in body["workers"]] == [
        ("w-1", "live"),
        ("w-2", "stopped"),
        ("w-3", "gone"),
    ]
    one = viewer.get("/api/v1/workers/w-1").json()
    assert one["in_flight_by_queue"] == {"default": 2} and one["queues"] is None
    assert (one["claimed"], one["completed"], one["concurrency"], one["pid"]) == (9, 7, 4, 42)
    assert one["heartbeat_s"] == 5.0 and one["stopped_at"] is None
    assert viewer.get("/api/v1/workers/w-2").json()["queues"] == ["emails"]


def test_status_filter_and_cursor_pages(viewer: Api) -> None:
    for n in range(5):
        register(f"w-{n}", stopped=n % 2 == 1)
    live = viewer.get("/api/v1/workers?status=live").json()["workers"]
    assert [w["id"] for w in live] == ["w-0", "w-2", "w-4"]
    first = viewer.get("/api/v1/workers?limit=2").json()
    assert [w["id"] for w in first["workers"]] == ["w-0", "w-1"]
    assert first["next_cursor"] == "w-1"
    rest = viewer.get(f"/api/v1/workers?limit=2&cursor={first['next_cursor']}").json()
    assert [w["id"] for w in rest["workers"]] == ["w-2", "w-3"]
    last = viewer.get("/api/v1/workers?limit=2&cursor=w-3").json()
    assert [w["id"] for w in last["workers"]] == ["w-4"] and last["next_cursor"] is None


@pytest.mark.parametrize(
    "query",
    [
        "status=dead",
        "status=",
        "limit=0",
        "limit=201",
        "limit=x",
        "cursor=",
        "status=live&status=gone",
    ],
)
def test_bad_parameters_are_a_400_naming_them(viewer: Api, query: str) -> None:
    response = viewer.get(f"/api/v1/workers?{query}")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_query_parameter"
    assert query.split("=")[0] in error["detail"]


def test_an_unknown_worker_is_a_404_in_the_envelope(viewer: Api) -> None:
    response = viewer.get("/api/v1/workers/nobody")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_reads_need_view_worker_and_nothing_can_be_written(viewer: Api) -> None:
    register("w-1")
    user = User.objects.create_user("jobs-only", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_job"))
    client = APIClient()
    client.force_authenticate(user)
    assert client.get("/api/v1/workers").status_code == 403
    assert client.get("/api/v1/workers/w-1").status_code == 403
    assert APIClient().get("/api/v1/workers").status_code in (401, 403)
    for method in ("post", "put", "delete"):
        response = getattr(viewer.client, method)("/api/v1/workers/w-1")
        assert response.status_code in (403, 405)
    assert Worker.objects.count() == 1


def test_a_status_filter_pages_on_past_the_rows_one_read_takes(
    viewer: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page reads at most MAX_WORKERS rows of the registry: a status that only rows
    past them have is on a later page, not missing with ``next_cursor`` null."""
    from headgate_django.api.views import workers as view
    from headgate_django.store import workers as store

    monkeypatch.setattr(view, "MAX_WORKERS", 3)
    monkeypatch.setattr(store, "MAX_WORKERS", 3)
    for n in range(7):
        register(f"w-{n}", stopped=n not in (4, 6))
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        query = "?status=live&limit=1" + (f"&cursor={cursor}" if cursor else "")
        body = viewer.get(f"/api/v1/workers{query}").json()
        seen += [w["id"] for w in body["workers"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["w-4", "w-6"]

"""Lists of one state, newest first, paged, on every database; on MySQL/MariaDB read
through the state index (``store.index_hints``): left to itself MariaDB walks the primary
key past every newer row of other states (15 s for 50 scheduled jobs behind 2 million
finished ones, measured by ``benchmarks/large_tables.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from headgate_django.kernel.states import State
from tests.conformance.helpers import job_in_state

pytestmark = pytest.mark.django_db

HINT = "FORCE INDEX (headgate_job_state_my)"


def _job_selects(captured: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in captured.captured_queries
        if "FROM `headgate_job`" in q["sql"] or 'FROM "headgate_job"' in q["sql"]
    ]


@pytest.fixture
def jobs() -> dict[str, list[str]]:
    made: dict[str, list[str]] = {"scheduled": [], "completed": []}
    for _ in range(3):
        made["scheduled"].append(job_in_state(State.SCHEDULED)[0])
    for _ in range(4):
        made["completed"].append(job_in_state(State.COMPLETED)[0])
    return made


def test_api_pages_one_state_newest_first(jobs: dict[str, list[str]], superuser: Any) -> None:
    client = Client()
    client.force_login(superuser)
    seen: list[str] = []
    url = "/api/v1/jobs?state=scheduled&limit=2"
    with CaptureQueriesContext(connection) as captured:
        while url:
            body = client.get(url).json()
            seen += [job["id"] for job in body["jobs"]]
            cursor = body["next_cursor"]
            url = f"/api/v1/jobs?state=scheduled&limit=2&cursor={cursor}" if cursor else ""
    assert seen == sorted(jobs["scheduled"], reverse=True)
    selects = _job_selects(captured)
    hinted = [sql for sql in selects if HINT in sql]
    assert len(hinted) == (len(selects) if connection.vendor == "mysql" else 0)


def test_api_list_of_two_states_is_not_hinted(jobs: dict[str, list[str]], superuser: Any) -> None:
    client = Client()
    client.force_login(superuser)
    with CaptureQueriesContext(connection) as captured:
        body = client.get("/api/v1/jobs?state=scheduled&state=completed&limit=50").json()
    assert [job["id"] for job in body["jobs"]] == sorted(
        jobs["scheduled"] + jobs["completed"], reverse=True
    )
    assert not [sql for sql in _job_selects(captured) if HINT in sql]


def test_admin_list_of_one_state(jobs: dict[str, list[str]], superuser: Any) -> None:
    client = Client()
    client.force_login(superuser)
    url = reverse("admin:headgate_django_job_changelist") + "?state__exact=scheduled"
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    shown = [job.id for job in response.context["cl"].result_list]
    assert shown == sorted(jobs["scheduled"], reverse=True)
    assert response.context["cl"].result_count == 3
    selects = _job_selects(captured)
    hinted = [sql for sql in selects if HINT in sql]
    # The capped count and the page itself.
    assert len(hinted) == (2 if connection.vendor == "mysql" else 0)

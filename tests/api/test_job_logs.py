"""``GET /api/v1/jobs/{id}/logs``: each attempt's ``ctx.log`` entries, filtered by level,
for the view permission; never in the job list or the detail."""

from __future__ import annotations

import pytest

from headgate_django import task, testing
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db

MARKER = "log-marker-51c0"


@task(kind="test.api.logs", max_attempts=2)
def chatty(ctx, fail: bool = False):
    ctx.log.debug("details", marker=MARKER)
    ctx.log.info("fetched", rows=12)
    ctx.log.error("upstream slow", ms=950)
    if fail and ctx.attempt == 1:
        raise RuntimeError("once")


def test_each_attempt_with_its_outcome_and_entries(viewer: Api) -> None:
    job_id = chatty.enqueue(fail=True)
    testing.run_jobs(include_scheduled=True)
    body = viewer.get(f"/api/v1/jobs/{job_id}/logs").json()
    assert [(a["attempt"], a["outcome"]) for a in body["attempts"]] == [
        (1, "error"),
        (2, "success"),
    ]
    first = body["attempts"][0]
    assert set(first) == {"attempt", "outcome", "at", "entries", "dropped"}
    assert [e["level"] for e in first["entries"]] == ["debug", "info", "error"]
    assert first["entries"][1]["fields"] == {"rows": 12}
    assert set(first["entries"][0]) == {"level", "at_ms", "message", "fields", "truncated"}


def test_the_level_filter_keeps_that_level_and_above(viewer: Api) -> None:
    job_id = chatty.enqueue()
    testing.run_one()
    body = viewer.get(f"/api/v1/jobs/{job_id}/logs", {"level": "info"}).json()
    assert [e["message"] for e in body["attempts"][0]["entries"]] == ["fetched", "upstream slow"]


def test_an_unknown_level_is_a_400_naming_the_parameter(viewer: Api) -> None:
    job_id = chatty.enqueue()
    response = viewer.get(f"/api/v1/jobs/{job_id}/logs", {"level": "loud"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_query_parameter"
    assert "level" in response.json()["error"]["message"]


def test_no_logs_yet_and_an_unknown_job(viewer: Api) -> None:
    job_id = chatty.enqueue()
    assert viewer.get(f"/api/v1/jobs/{job_id}/logs").json() == {"attempts": []}
    missing = viewer.get("/api/v1/jobs/no-such-job/logs")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_logs_are_never_in_the_list_or_the_detail(operator: Api) -> None:
    job_id = chatty.enqueue()
    testing.run_one()
    for path in ("/api/v1/jobs", f"/api/v1/jobs/{job_id}?include_payload=1"):
        content = operator.get(path).content
        assert MARKER.encode() not in content, path
        assert b'"logs"' not in content and b"upstream slow" not in content, path

"""``GET /jobs/{id}/effects``: the records of ``ctx.once``, for payload viewers only."""

from __future__ import annotations

import pytest

from headgate_django.context import JobContext
from tests.api.conftest import Api
from tests.conformance.helpers import claim, enqueue_job

pytestmark = pytest.mark.django_db


def test_effects_list_names_results_and_fences(operator: Api, blind_operator: Api) -> None:
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    ctx.once("charge", lambda: {"charge": "ch_1"})
    ctx.once("email", lambda: None)
    body = operator.get(f"/api/v1/jobs/{job_id}/effects").json()
    assert [(e["name"], e["result"], e["fence"]) for e in body["effects"]] == [
        ("charge", {"charge": "ch_1"}, 1),
        ("email", None, 1),
    ]
    assert blind_operator.get(f"/api/v1/jobs/{job_id}/effects").status_code == 403


def test_effects_of_a_job_without_any_and_of_no_job(operator: Api) -> None:
    job_id = enqueue_job()
    assert operator.get(f"/api/v1/jobs/{job_id}/effects").json() == {"effects": []}
    missing = operator.get("/api/v1/jobs/no-such-job/effects")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"

"""``GET /api/v1/jobs/{id}/output``: the output a handler set, for the payload permission
only, and never in the job list or detail."""

from __future__ import annotations

import base64

import pytest

from headgate_django.kernel.states import State
from headgate_django.store.output import job_save_output
from tests.api.conftest import Api
from tests.conformance.helpers import enqueue_job, job_in_state

pytestmark = pytest.mark.django_db

MARKER = "output-marker-7d2e"


def test_the_operator_reads_the_output_as_base64_with_its_instant(operator: Api) -> None:
    job_id, claimed = job_in_state(State.RUNNING)
    assert claimed is not None
    job_save_output(claimed.ref, MARKER.encode())
    body = operator.get(f"/api/v1/jobs/{job_id}/output").json()
    assert set(body) == {"output", "updated_at"}
    assert base64.b64decode(body["output"]) == MARKER.encode()
    assert body["updated_at"]


def test_no_output_yet_is_null(operator: Api) -> None:
    job_id = enqueue_job()
    assert operator.get(f"/api/v1/jobs/{job_id}/output").json() == {
        "output": None,
        "updated_at": None,
    }


def test_an_unknown_job_is_a_404_in_the_error_envelope(operator: Api) -> None:
    response = operator.get("/api/v1/jobs/no-such-job/output")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_viewer_without_the_payload_permission_is_refused(viewer: Api) -> None:
    job_id, claimed = job_in_state(State.RUNNING)
    assert claimed is not None
    job_save_output(claimed.ref, MARKER.encode())
    response = viewer.get(f"/api/v1/jobs/{job_id}/output")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "payload_permission_required"


def test_output_is_never_in_the_list_or_the_detail(operator: Api) -> None:
    job_id, claimed = job_in_state(State.RUNNING)
    assert claimed is not None
    job_save_output(claimed.ref, MARKER.encode())
    encoded = base64.b64encode(MARKER.encode())
    for path in ("/api/v1/jobs", f"/api/v1/jobs/{job_id}?include_payload=1"):
        content = operator.get(path).content
        assert MARKER.encode() not in content and encoded not in content, path
        assert b'"output"' not in content, path


def test_an_id_no_job_can_have_is_an_unknown_route(operator: Api) -> None:
    response = operator.get("/api/v1/jobs/bad%01id/output")
    assert response.status_code == 404
    assert "error" in response.json()

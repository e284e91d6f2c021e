"""Every route of the API with a setup that makes an operator's call succeed.

The table is checked against the generated OpenAPI schema (``test_permissions``), so a new
route without a row here fails the suite.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from headgate_django import durable, schedules, testing
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.workflows import Workflow
from tests.api.conftest import onboarding_workflow
from tests.app import tasks
from tests.conformance.helpers import job_in_state

Setup = Callable[[], tuple[str, Any]]


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # as in the OpenAPI schema
    setup: Setup
    status: int  # an operator's success
    #: The whole answer is user data: 403 without ``view_job_payload``.
    user_data: bool = False

    @property
    def is_read(self) -> bool:
        return self.method == "GET"

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


def _static(path: str, body: Any = None) -> Setup:
    return lambda: (path, body)


def _job(state: State, suffix: str = "", body: Any = None) -> Setup:
    def setup() -> tuple[str, Any]:
        job_id, _ = job_in_state(state)
        return f"/api/v1/jobs/{job_id}{suffix}", body

    return setup


def _workflow(suffix: str = "", body: Any = None) -> Setup:
    def setup() -> tuple[str, Any]:
        onboarding_workflow()
        return f"/api/v1/workflows/onboarding%3A42{suffix}", body

    return setup


def _workflow_list() -> tuple[str, Any]:
    onboarding_workflow()
    return "/api/v1/workflows", None


def _failed_workflow() -> tuple[str, Any]:
    from headgate_django import enqueue

    enqueue(
        Workflow("r:1")
        .failed_subgraph_retry()
        .add("only", tasks.always_fail.envelope(), [])
        .prepare()
    )
    testing.run_jobs(include_scheduled=True)
    return "/api/v1/workflows/r:1/retry", {"expected_revision": 1}


def _quarantined() -> tuple[str, Any]:
    job_id, _ = job_in_state(State.QUARANTINED)
    return f"/api/v1/quarantine/{Job.objects.get(pk=job_id).fingerprint}", None


def _execution(
    suffix: str = "", body: Any = None, then: Callable[[str], Any] | None = None
) -> Setup:
    def setup() -> tuple[str, Any]:
        wf = durable.Client().start("api-wait", "1", {"n": 1}).workflow_id
        if then is not None:
            then(wf)
        return f"/api/v1/durable/executions/{wf}{suffix}", body

    return setup


def _listed_execution() -> tuple[str, Any]:
    durable.Client().start("api-wait", "1", {"n": 1})
    return "/api/v1/durable/executions", None


def _uncertain() -> tuple[str, Any]:
    wf = durable.Client().start("api-unsure", "1", None).workflow_id
    for _ in range(5):
        testing.run_jobs()
    assert durable.Manager().get(wf).state == "suspended"
    return (
        f"/api/v1/durable/executions/{wf}/resolve-uncertain",
        {"command_id": "op:1", "decision": "complete", "result": "ok"},
    )


def _schedule(suffix: str = "", listed: bool = False) -> Setup:
    def setup() -> tuple[str, Any]:
        schedules.upsert("api-nightly", "0 3 * * *", tasks.echo.envelope(value=1))
        return "/api/v1/schedules" if listed else f"/api/v1/schedules/api-nightly{suffix}", None

    return setup


def _worker(listed: bool = False) -> Setup:
    def setup() -> tuple[str, Any]:
        from headgate_django.store.workers import Beat, worker_heartbeat

        worker_heartbeat(
            Beat("api-host:7:abc", "api-host", 7, ["default"], 2, timedelta(seconds=5))
        )
        return "/api/v1/workers" if listed else "/api/v1/workers/api-host:7:abc", None

    return setup


def _admission(kind: str) -> Setup:
    def setup() -> tuple[str, Any]:
        from headgate_django import admission

        if kind == "rate-classes":
            admission.set_rate_class("api-rc", limit=5, window=1)
            return "/api/v1/admission/rate-classes/api-rc", None
        if kind == "concurrency-limits":
            admission.set_concurrency_limit("api-q", 2)
        elif kind == "queue-weights":
            admission.set_queue_weight("api-q", 2)
        elif kind == "fairness":
            admission.set_fairness("api-q")
        else:
            admission.set_backpressure("api-q", 10)
        return f"/api/v1/admission/{kind}/api-q", None

    return setup


def _bulk() -> tuple[str, Any]:
    job_id, _ = job_in_state(State.ARCHIVED)
    body = {"action": "retry", "filter": {"ids": [job_id]}, "expected_count": 1}
    return "/api/v1/jobs/actions", body


PAYLOAD = base64.b64encode(b'{"args":[],"kwargs":{}}').decode()

ROUTES = [
    Route("GET", "/api/v1/healthz", _static("/api/v1/healthz"), 200),
    Route("GET", "/api/v1/readyz", _static("/api/v1/readyz"), 200),
    Route("GET", "/api/v1/meta", _static("/api/v1/meta"), 200),
    # jobs
    Route("GET", "/api/v1/jobs", _static("/api/v1/jobs"), 200),
    Route("POST", "/api/v1/jobs", _static("/api/v1/jobs", {"kind": "test.noop"}), 201),
    Route("GET", "/api/v1/jobs/counts", _static("/api/v1/jobs/counts"), 200),
    Route("POST", "/api/v1/jobs/actions", _bulk, 200),
    Route("GET", "/api/v1/jobs/{id}", _job(State.AVAILABLE), 200),
    Route("DELETE", "/api/v1/jobs/{id}", _job(State.AVAILABLE), 204),
    Route("POST", "/api/v1/jobs/{id}/retry", _job(State.ARCHIVED, "/retry"), 200),
    Route("POST", "/api/v1/jobs/{id}/cancel", _job(State.AVAILABLE, "/cancel"), 200),
    Route("POST", "/api/v1/jobs/{id}/promote", _job(State.PENDING, "/promote"), 200),
    Route(
        "POST",
        "/api/v1/jobs/{id}/reschedule",
        _job(State.PENDING, "/reschedule", {"delay_ms": 60000}),
        200,
    ),
    Route(
        "PUT",
        "/api/v1/jobs/{id}/payload",
        _job(State.UNDECODABLE, "/payload", {"payload": PAYLOAD, "schema_version": 1}),
        200,
    ),
    Route("GET", "/api/v1/jobs/{id}/result", _job(State.COMPLETED, "/result"), 200, True),
    Route("GET", "/api/v1/jobs/{id}/checkpoint", _job(State.AVAILABLE, "/checkpoint"), 200, True),
    Route("GET", "/api/v1/jobs/{id}/output", _job(State.AVAILABLE, "/output"), 200, True),
    Route("GET", "/api/v1/jobs/{id}/effects", _job(State.AVAILABLE, "/effects"), 200, True),
    Route("GET", "/api/v1/jobs/{id}/progress", _job(State.AVAILABLE, "/progress"), 200),
    Route("GET", "/api/v1/jobs/{id}/logs", _job(State.COMPLETED, "/logs"), 200),
    # queues and quarantine
    Route("GET", "/api/v1/queues", _static("/api/v1/queues"), 200),
    Route(
        "POST", "/api/v1/queues/{name}/pause", _static("/api/v1/queues/q1/pause?create=true"), 204
    ),
    Route("POST", "/api/v1/queues/{name}/resume", _static("/api/v1/queues/default/resume"), 204),
    Route("GET", "/api/v1/quarantine", _static("/api/v1/quarantine"), 200),
    Route("DELETE", "/api/v1/quarantine/{fingerprint}", _quarantined, 204),
    # workflows
    Route("GET", "/api/v1/workflows", _workflow_list, 200),
    Route("GET", "/api/v1/workflows/{workflow_id}", _workflow(), 200),
    Route("GET", "/api/v1/workflows/{workflow_id}/nodes/{node}", _workflow("/nodes/welcome"), 200),
    Route(
        "GET",
        "/api/v1/workflows/{workflow_id}/nodes/{node}/dependencies",
        _workflow("/nodes/welcome/dependencies"),
        200,
    ),
    Route(
        "GET",
        "/api/v1/workflows/{workflow_id}/nodes/{node}/dependents",
        _workflow("/nodes/prepare/dependents"),
        200,
    ),
    Route("GET", "/api/v1/workflows/{workflow_id}/events", _workflow("/events"), 200),
    Route("GET", "/api/v1/workflows/{workflow_id}/signals", _workflow("/signals"), 200),
    Route(
        "POST",
        "/api/v1/workflows/{workflow_id}/signals",
        _workflow("/signals", {"signal": "approved", "payload": {"ok": True}}),
        200,
    ),
    Route(
        "POST",
        "/api/v1/workflows/{workflow_id}/grafts",
        _workflow(
            "/grafts",
            {"expected_revision": 1, "tasks": [{"name": "extra", "kind": "test.noop"}]},
        ),
        202,
    ),
    Route("POST", "/api/v1/workflows/{workflow_id}/retry", _failed_workflow, 200),
    Route("POST", "/api/v1/workflows/{workflow_id}/cancel", _workflow("/cancel", {}), 200),
    # durable executions
    Route("GET", "/api/v1/durable/executions", _listed_execution, 200),
    Route(
        "POST",
        "/api/v1/durable/executions",
        _static("/api/v1/durable/executions", {"name": "api-wait", "version": "1", "input": 1}),
        201,
    ),
    Route(
        "POST",
        "/api/v1/durable/executions/signal-with-start",
        _static(
            "/api/v1/durable/executions/signal-with-start",
            {
                "name": "api-wait",
                "version": "1",
                "business_idempotency_key": "order:1",
                "signal": "go",
            },
        ),
        201,
    ),
    Route("GET", "/api/v1/durable/executions/{workflow_id}", _execution(), 200),
    Route(
        "GET",
        "/api/v1/durable/executions/{workflow_id}/history",
        _execution("/history"),
        200,
        True,
    ),
    Route(
        "POST",
        "/api/v1/durable/executions/{workflow_id}/signal",
        _execution("/signal", {"name": "go", "payload": 1}),
        200,
    ),
    Route(
        "POST", "/api/v1/durable/executions/{workflow_id}/cancel", _execution("/cancel", {}), 200
    ),
    Route("POST", "/api/v1/durable/executions/{workflow_id}/suspend", _execution("/suspend"), 200),
    Route(
        "POST",
        "/api/v1/durable/executions/{workflow_id}/resume",
        _execution("/resume", then=lambda wf: durable.Manager().suspend(wf)),
        200,
    ),
    Route("POST", "/api/v1/durable/executions/{workflow_id}/resolve-uncertain", _uncertain, 200),
    Route(
        "GET",
        "/api/v1/durable/executions/{workflow_id}/queries/{query_name}",
        _execution("/queries/notes"),
        200,
    ),
    Route(
        "POST",
        "/api/v1/durable/executions/{workflow_id}/updates/{update_name}",
        _execution("/updates/note", {"payload": "hello"}),
        202,
    ),
    Route(
        "GET",
        "/api/v1/durable/executions/{workflow_id}/updates/{update_name}/{update_id}",
        _execution(
            "/updates/note/u-1",
            then=lambda wf: durable.Manager().update(wf, "note", "hi", update_id="u-1", wait=False),
        ),
        200,
    ),
    # periodic schedules
    Route("GET", "/api/v1/schedules", _schedule(listed=True), 200),
    Route("GET", "/api/v1/schedules/{name}", _schedule(), 200),
    Route(
        "PUT",
        "/api/v1/schedules/{name}",
        _static("/api/v1/schedules/api-new", {"spec": "@hourly", "task": "test.echo"}),
        200,
    ),
    Route("DELETE", "/api/v1/schedules/{name}", _schedule(), 204),
    Route("POST", "/api/v1/schedules/{name}/pause", _schedule("/pause"), 200),
    Route("POST", "/api/v1/schedules/{name}/resume", _schedule("/resume"), 200),
    Route("POST", "/api/v1/schedules/{name}/run", _schedule("/run"), 201),
    Route("GET", "/api/v1/schedules/{name}/events", _schedule("/events"), 200),
    # the worker registry
    Route("GET", "/api/v1/workers", _worker(listed=True), 200),
    Route("GET", "/api/v1/workers/{worker_id}", _worker(), 200),
    # admission
    Route("GET", "/api/v1/jobs/{id}/admission", _job(State.AVAILABLE, "/admission"), 200),
    Route("GET", "/api/v1/admission/rate-classes", _static("/api/v1/admission/rate-classes"), 200),
    Route(
        "PUT",
        "/api/v1/admission/rate-classes/{name}",
        _static("/api/v1/admission/rate-classes/api-rc", {"limit": 5, "window_ms": 1000}),
        200,
    ),
    Route("DELETE", "/api/v1/admission/rate-classes/{name}", _admission("rate-classes"), 204),
    Route(
        "GET",
        "/api/v1/admission/concurrency-limits",
        _static("/api/v1/admission/concurrency-limits"),
        200,
    ),
    Route(
        "PUT",
        "/api/v1/admission/concurrency-limits/{name}",
        _static("/api/v1/admission/concurrency-limits/api-q", {"max_concurrent": 2}),
        200,
    ),
    Route(
        "DELETE",
        "/api/v1/admission/concurrency-limits/{name}",
        _admission("concurrency-limits"),
        204,
    ),
    Route("GET", "/api/v1/admission/backpressure", _static("/api/v1/admission/backpressure"), 200),
    Route(
        "PUT",
        "/api/v1/admission/backpressure/{name}",
        _static("/api/v1/admission/backpressure/api-q", {"max_unfinished": 10}),
        200,
    ),
    Route("DELETE", "/api/v1/admission/backpressure/{name}", _admission("backpressure"), 204),
    Route(
        "GET", "/api/v1/admission/queue-weights", _static("/api/v1/admission/queue-weights"), 200
    ),
    Route(
        "PUT",
        "/api/v1/admission/queue-weights/{name}",
        _static("/api/v1/admission/queue-weights/api-q", {"weight": 3}),
        200,
    ),
    Route("DELETE", "/api/v1/admission/queue-weights/{name}", _admission("queue-weights"), 204),
    Route("GET", "/api/v1/admission/fairness", _static("/api/v1/admission/fairness"), 200),
    Route(
        "PUT",
        "/api/v1/admission/fairness/{name}",
        _static("/api/v1/admission/fairness/api-q", {"quantum": 5}),
        200,
    ),
    Route("DELETE", "/api/v1/admission/fairness/{name}", _admission("fairness"), 204),
]

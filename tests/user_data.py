"""One row of every kind of user data, each carrying :data:`SECRET`, made through the
public verbs: the visibility tests look for the marker in every answer a user without
``headgate_django.view_job_payload`` gets (API, admin, console pages, sockets)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone

from headgate_django import durable, enqueue, schedules, task, testing
from headgate_django.models import IdempotencyRecord, Quarantine
from headgate_django.workflows import SignalEmission, Workflow, emit_signal_with

SECRET = "hg-secret-4c1f"


@task(kind="test.user-data")
def keep_secret(ctx: Any, secret: str) -> dict[str, str]:
    """Leaves the secret in its payload, step checkpoint, cursor, output, effect and result."""
    ctx.step("remember", lambda: {"step": secret})

    def walk(cursor: bytes | None) -> str:
        ctx.set_cursor(f"cursor-{secret}".encode())
        return secret

    ctx.step_cursor("walk", walk)
    ctx.set_output(f"output-{secret}")
    ctx.once("effect", lambda: {"effect": secret})
    return {"result": secret}


@durable.workflow("user-data", version="1")
def answer_with_secret(ctx: durable.Context, order: Any) -> Any:
    ctx.state["order"] = order
    go = ctx.wait_signal("go")
    ctx.select(go)
    return {"input": order, "signal": go.result()}


@durable.workflow("user-data-runs", version="1")
def continue_with_secret(ctx: durable.Context, order: Any) -> Any:
    """Continues as new once: the first run's input and history are archived."""
    if order.get("run", 0) == 0:
        ctx.continue_as_new({**order, "run": 1})
    return order


@answer_with_secret.query("order")
def order_of(ctx: durable.Context) -> Any:
    return ctx.state["order"]


@answer_with_secret.update("echo")
def echo(ctx: durable.Context, value: Any) -> Any:
    return value


@dataclass(frozen=True)
class UserData:
    job_id: str
    workflow_id: str
    execution_id: str


def seed_user_data() -> UserData:
    (job_id,) = enqueue(keep_secret.envelope(secret=SECRET))
    testing.run_jobs()
    workflow_id = "user-data-wf"
    enqueue(
        Workflow(workflow_id)
        .add("first", keep_secret.envelope(secret=SECRET), [])
        .add_signal("approval", "approved", ["first"])
        .prepare()
    )
    testing.run_jobs()
    emission = SignalEmission("approved", "key-1", {"by": SECRET}, {"actor": SECRET})
    emit_signal_with(workflow_id, emission)
    testing.run_jobs()
    client = durable.Client()
    done = client.start("user-data", "1", {"order": SECRET}, meta={"note": SECRET}).workflow_id
    testing.run_jobs()
    durable.Manager().update(done, "echo", {"echo": SECRET}, update_id="u-secret", wait=False)
    testing.run_jobs()
    client.signal(done, "go", {"go": SECRET}, message_id="m-1")
    testing.run_jobs()
    assert durable.Manager().get(done).state == "succeeded"
    runs = client.start("user-data-runs", "1", {"order": SECRET}).workflow_id
    testing.run_jobs()
    assert durable.Manager().get(runs).state == "succeeded"
    Quarantine.objects.create(
        fingerprint="e" * 32,
        kind="test.crash",
        crash_count=3,
        quarantined_at=timezone.now(),
        sample_payload=f'{{"secret": "{SECRET}"}}'.encode(),
        sample_job_id="crashed-1",
        reason="crashed 3 times",
    )
    IdempotencyRecord.objects.create(
        key_digest="c" * 64,
        key="k-secret",
        user="1",
        method="POST",
        path="/api/v1/jobs",
        body_hash="b" * 64,
        status_code=201,
        response_body=f'{{"id": "{SECRET}"}}'.encode(),
        created_at=timezone.now(),
        expires_at=timezone.now() + timedelta(days=1),
    )
    schedules.upsert("secret-schedule", "@every 60s", keep_secret.envelope(secret=SECRET))
    from headgate_django.store.workers import Beat, worker_heartbeat

    worker_heartbeat(Beat("secret-worker", "host", 1, ["default"], 1, timedelta(seconds=5)))
    return UserData(job_id, workflow_id, done)

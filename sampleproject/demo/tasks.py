"""Example tasks of the sample project (autodiscovered by headgate_django)."""

from __future__ import annotations

import random
import time
from datetime import timedelta

from headgate_django import JobContext, Snooze, durable, task


@task(queue="default")
def send_welcome_email(ctx: JobContext, user_id: int) -> dict:
    time.sleep(random.uniform(0.05, 0.3))
    return {"sent_to": user_id}


@task(queue="default", schema_version=2)
def send_welcome(ctx: JobContext, email: str) -> dict:
    """Schema version 2 takes the address itself. Version 1 payloads carried a user id and
    there is deliberately no upcaster: the address has to come from an operator's repair
    (the onboarding example of the workflow guide)."""
    time.sleep(random.uniform(0.05, 0.3))
    return {"sent_to": email}


@task(queue="reports", max_attempts=5)
def build_report(ctx: JobContext, day: str) -> dict:
    """Fails on its first attempt half of the time, to show retries with backoff."""
    if ctx.attempt == 1 and random.random() < 0.5:
        raise RuntimeError("the warehouse was busy; will retry")
    time.sleep(random.uniform(0.2, 0.8))
    return {"day": day, "rows": random.randint(100, 1000)}


@task(queue="imports")
def import_pages(ctx: JobContext, pages: int = 20) -> int:
    """A resumable cursor step: a retry continues from the last saved page."""

    def walk(cursor: bytes | None) -> int:
        for page in range(int(cursor or b"0"), pages):
            time.sleep(0.1)
            ctx.set_progress(page + 1, pages, f"page {page + 1} of {pages}")
            ctx.set_cursor(str(page + 1).encode())
        return pages

    return ctx.step_cursor("import-pages", walk)


@task(queue="default")
def wait_for_partner(ctx: JobContext, order: int) -> str:
    """Snoozes once (no attempt consumed), then finishes."""
    if ctx.attempt == 1 and not ctx.completed_steps:
        ctx.step("asked", lambda: True)
        raise Snooze(timedelta(seconds=3))
    return f"order {order} confirmed"


# -- the workflow examples of the guide ----------------------------------------------


@task(queue="default")
def extract(ctx: JobContext, day: str) -> dict:
    time.sleep(random.uniform(0.5, 1.5))
    return {"day": day, "files": 3}


@task(queue="default")
def load(ctx: JobContext, table: str) -> dict:
    time.sleep(random.uniform(0.5, 2.0))
    return {"table": table, "rows": random.randint(1000, 5000)}


@task(queue="default")
def step(ctx: JobContext, name: str) -> str:
    time.sleep(random.uniform(0.2, 1.0))
    return name


# -- a durable (workflow-as-code) checkout -------------------------------------------


@durable.operation("charge", version="1")
def charge(ctx: durable.OperationContext, order: dict) -> dict:
    """A side effect, made idempotent by ``ctx.execution_key`` (the same on every retry).

    A provider timeout means we do not know whether the card was charged: the Operation
    ends uncertain and the execution waits for an operator's ``resolve_uncertain``.
    """
    time.sleep(0.2)
    if order.get("provider_times_out"):
        raise durable.Uncertain("the payment provider timed out; check the charge by hand")
    return {"charged": order["amount"], "idempotency_key": ctx.execution_key}


@durable.workflow("checkout", version="1")
def checkout(ctx: durable.Context, order: dict) -> dict:
    receipt = ctx.execute_operation("charge", "1", order).result()
    approved = ctx.select(ctx.wait_signal("approved"), ctx.sleep(timedelta(seconds=30))) == 0
    return {"receipt": receipt, "approved_by_operator": approved}

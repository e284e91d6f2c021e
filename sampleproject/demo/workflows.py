"""The workflow examples of the guide, as the demo creates them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from headgate_django.envelope import encode_call
from headgate_django.store import db_now
from headgate_django.workflows import Workflow, prepare_bundle
from sampleproject.demo import tasks


def daily_import(day: str) -> Workflow:
    return (
        Workflow(f"daily-import:{day}")
        .coordinator_queue("workflows")
        .add("extract", tasks.extract.envelope(day=day), [])
        .add("customers", tasks.load.envelope(table="customers"), ["extract"])
        .add("orders", tasks.load.envelope(table="orders"), ["extract"])
        .add("index", tasks.step.envelope(name="index"), ["customers", "orders"])
    )


def onboarding(user: int) -> Workflow:
    """The workflow guide's onboarding example, in the state its API examples expect.

    It waits for an operator's ``approved`` signal. Its ``send-welcome`` node was queued
    before ``send_welcome`` moved to schema version 2 (an address instead of a user id, with
    no upcaster), so after the approval that node stops ``undecodable`` and the workflow
    fails at revision 1. ``failed_subgraph_retry()`` lets an operator repair it:
    ``POST /api/v1/workflows/onboarding:42/retry`` with a recovery payload (docs/api.md).
    """
    current = tasks.send_welcome.envelope(email=f"user-{user}@example.com")
    queued_by_an_older_release = replace(
        current, payload=encode_call((), {"user_id": user}), schema_version=1
    )
    return (
        Workflow(f"onboarding:{user}")
        .failed_subgraph_retry()
        .add("prepare", tasks.step.envelope(name="prepare"), [])
        .add_signal("approval", "approved", ["prepare"])
        .add("send-welcome", queued_by_an_older_release, ["approval"])
    )


def release(number: int, in_seconds: int = 120) -> Workflow:
    at_ms = int(db_now().timestamp() * 1000) + in_seconds * 1000
    return (
        Workflow(f"release:{number}")
        .add("prepare", tasks.step.envelope(name="prepare"), [])
        .add_timer_at("release-window", at_ms, ["prepare"])
        .add("publish", tasks.step.envelope(name="publish"), ["release-window"])
    )


def follow_up(number: int) -> Workflow:
    return (
        Workflow(f"follow-up:{number}")
        .add("prepare", tasks.step.envelope(name="prepare"), [])
        .add_timer_after("cooldown", timedelta(minutes=1), ["prepare"])
        .add("notify", tasks.step.envelope(name="notify"), ["cooldown"])
    )


def approval_gate(number: int) -> Workflow:
    return (
        Workflow(f"approval:{number}")
        .add("prepare", tasks.step.envelope(name="prepare"), [])
        .add_condition(
            "eligible", "completed.prepare && states.prepare == 'completed'", ["prepare"]
        )
        .add("grant", tasks.step.envelope(name="grant"), ["eligible"])
    )


def checkout(order: int):  # type: ignore[no-untyped-def]
    child = Workflow(f"billing:{order}").add("charge", tasks.step.envelope(name="charge"), [])
    parent = (
        Workflow(f"checkout:{order}")
        .add_child("billing", f"billing:{order}", [])
        .add("receipt", tasks.step.envelope(name="receipt"), ["billing"])
    )
    return prepare_bundle([parent, child])

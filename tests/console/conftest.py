"""Users of every kind and one row (at least) of every headgate model, made through the
public verbs wherever one exists, so the console is tested against realistic data."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from headgate_django import enqueue, schedules, store, testing
from headgate_django.envelope import Envelope
from headgate_django.models import DutyLease, Effect, IdempotencyRecord, Quarantine
from headgate_django.workflows import (
    SignalEmission,
    Workflow,
    WorkflowGraft,
    emit_signal_with,
    submit_graft,
)
from tests.app import tasks
from tests.console import defs  # noqa: F401  (registers the durable definitions)

CONSOLE_VIEW_PERMS = ["view_job", "view_execution"]


def make_user(name: str, *, staff: bool, perms: list[str] = ()) -> User:
    user = User.objects.create_user(name, f"{name}@example.com", "pw", is_staff=staff)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="headgate_django", codename__in=perms)
    )
    return user


@pytest.fixture
def superuser(db: Any) -> User:
    return User.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def reader(db: Any) -> User:
    """The viewer plus ``view_job_payload`` (not a superuser)."""
    codenames = Permission.objects.filter(
        content_type__app_label="headgate_django", codename__startswith="view_"
    ).values_list("codename", flat=True)
    return make_user("reader", staff=True, perms=list(codenames))


@pytest.fixture
def viewer(db: Any) -> User:
    """Staff with the view permission of every headgate model, nothing else."""
    codenames = list(
        Permission.objects.filter(
            content_type__app_label="headgate_django", codename__startswith="view_"
        )
        .exclude(codename="view_job_payload")
        .values_list("codename", flat=True)
    )
    return make_user("viewer", staff=True, perms=codenames)


@pytest.fixture
def staff_without_perms(db: Any) -> User:
    return make_user("bare-staff", staff=True)


@pytest.fixture
def outsider(db: Any) -> User:
    """Not staff, although it holds the view permissions."""
    return make_user("outsider", staff=False, perms=CONSOLE_VIEW_PERMS)


def signal_workflow(workflow_id: str) -> None:
    """extract → approved (signal) → load, ticked once so extract is available."""
    batch = (
        Workflow(workflow_id)
        .add("extract", tasks.echo.envelope(value=1, secret="payload-secret"), [])
        .add_signal("approved", "approved", ["extract"])
        .add("load", tasks.echo.envelope(value=2), ["approved"])
        .prepare()
    )
    enqueue(batch)
    testing.run_one(queues=["headgate-workflow"])


@dataclass
class ConsoleData:
    workflow_id: str
    execution_uncertain: str
    execution_waiting: str
    execution_continued: str


@pytest.fixture
def console_data(db: Any) -> ConsoleData:
    wf = "console-wf"
    signal_workflow(wf)
    testing.run_jobs(include_scheduled=True)  # extract completes; approved waits
    emit_signal_with(wf, SignalEmission("approved", "ops-1", {"ok": True}, {"by": "ops"}))
    submit_graft(
        WorkflowGraft(wf, 1).add("report", tasks.echo.envelope(value=3), ["load"]).prepare()
    )
    testing.run_jobs(include_scheduled=True)
    store.queue_set_paused("paused-queue", True)
    throttled = Envelope(
        "test.noop", unique_key="console-throttle", unique_window=timedelta(hours=1)
    )
    store.job_insert_many([throttled])
    Effect.objects.create(
        job_id="console-effect-job",
        name="charge",
        result={"ok": True},
        fence=1,
        created_at=timezone.now(),
    )
    from headgate_django import admission

    admission.set_rate_class("console-rc", limit=5, window=1)
    admission.set_concurrency_limit("console-limited", 3)
    admission.set_backpressure("console-limited", 100)
    admission.set_queue_weight("console-limited", 2)
    admission.set_fairness("console-fair", quantum=1, credit_cap=5)
    admission.set_concurrency_limit("console-fair", 1)
    for tenant in ("acme", "acme", "globex"):
        store.job_insert_many(
            [Envelope(kind="test.noop", queue="console-fair", partition_key=tenant)]
        )
    # acme is held by its ceiling with credit left: a carried deficit row.
    store.job_claim(
        worker_id="console", limit=3, lease_ttl=timedelta(minutes=5), queues=["console-fair"]
    )
    schedules.upsert("console-schedule", "@every 1h", tasks.echo.envelope(value=1))
    schedules.run_now("console-schedule")  # its event
    store.duty_acquire("console-duty", holder="tests", ttl=timedelta(seconds=30))
    DutyLease.objects.filter(pk="console-duty").update(last_result={"promoted": 3})
    Quarantine.objects.create(
        fingerprint="f" * 32,
        kind="test.crash",
        crash_count=3,
        quarantined_at=timezone.now(),
        sample_payload=b'{"secret": "sample"}',
        sample_job_id="crashed-1",
        reason="crashed 3 times",
    )
    IdempotencyRecord.objects.create(
        key_digest="d" * 64,
        key="k-1",
        user="1",
        method="POST",
        path="/api/v1/jobs",
        body_hash="b" * 64,
        status_code=201,
        response_body=b'{"id": "job-1"}',
        created_at=timezone.now(),
        expires_at=timezone.now() + timedelta(days=1),
    )
    from headgate_django.store.workers import Beat, queue_minutes_add, worker_heartbeat

    worker_heartbeat(Beat("console-host:1:abc", "console-host", 1, None, 2, timedelta(seconds=5)))
    queue_minutes_add({"default": (2, 1, 1)})
    from headgate_django import durable

    uncertain = durable.Client().start("console-pay", "1", {"order": 7}).workflow_id
    waiting = durable.Client().start("console-ship", "1", {"order": 8}).workflow_id
    continued = durable.Client().start("console-rounds", "1", 1).workflow_id
    testing.run_jobs()
    durable.Client().signal(waiting, "go", {"by": "ops"}, message_id="m-1")
    testing.run_one()  # the pass that schedules the shipping Operation, not the Operation
    return ConsoleData(wf, uncertain, waiting, continued)

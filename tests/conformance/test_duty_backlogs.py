"""Every clean-up duty keeps pace with what it cleans up: a run that comes back with a
full batch runs again on the next tick, not a whole interval later. At one batch a minute
(1,000 rows; 100 durable executions), a project writing more than that (throttled keys,
``ctx.once`` effects, API mutations, finished executions) grew the table for ever."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import models

from headgate_django import store
from headgate_django.durable.duties import vacuum_duty
from headgate_django.models import (
    DutyLease,
    Effect,
    Execution,
    IdempotencyRecord,
    SignalEmission,
    UniqueWindow,
)
from headgate_django.worker.duties import Duty, DutyRunner, default_duties

pytestmark = pytest.mark.django_db


def _windows(n: int) -> None:
    past = store.db_now() - timedelta(minutes=1)
    UniqueWindow.objects.bulk_create(
        UniqueWindow(unique_key=f"key-{i}", job_id=f"job-{i}", expires_at=past) for i in range(n)
    )


def _effects(n: int) -> None:
    now = store.db_now()
    Effect.objects.bulk_create(
        Effect(job_id=f"gone-{i}", name="charge", fence=1, created_at=now) for i in range(n)
    )


def _emissions(n: int) -> None:
    """Signal emissions of workflows gone before they wrote a checkpoint."""
    long_ago = store.db_now() - timedelta(days=8)
    SignalEmission.objects.bulk_create(
        SignalEmission(
            workflow_id=f"gone-{i}",
            signal="go",
            idempotency_key="k",
            content_hash="",
            emitted_at=long_ago,
        )
        for i in range(n)
    )


def _records(n: int) -> None:
    past = store.db_now() - timedelta(minutes=1)
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            key_digest=f"{i:064x}",
            key=f"k{i}",
            user="1",
            method="POST",
            path="/api/v1/jobs",
            body_hash="0" * 64,
            created_at=past,
            expires_at=past,
        )
        for i in range(n)
    )


def _executions(n: int) -> None:
    long_ago = store.db_now() - timedelta(days=40)
    Execution.objects.bulk_create(
        Execution(
            id=f"done-{i}",
            name="checkout",
            version="1",
            state="succeeded",
            created_at=long_ago,
            updated_at=long_ago,
            finished_at=long_ago,
        )
        for i in range(n)
    )


def _duty(name: str) -> Duty:
    if name == "durable-vacuum":
        return vacuum_duty()
    (duty,) = [d for d in default_duties() if d.name == name]
    return duty


#: Each duty: how to make a backlog of n rows, the model it deletes from, its batch.
CASES: dict[str, tuple[Callable[[int], None], type[models.Model], int]] = {
    "unique-windows": (_windows, UniqueWindow, 1000),
    "effects-prune": (_effects, Effect, 1000),
    "workflows-prune": (_emissions, SignalEmission, 1000),
    "idempotency-purge": (_records, IdempotencyRecord, 1000),
    "durable-vacuum": (_executions, Execution, 100),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_clean_up_duty_with_a_backlog_runs_again_on_the_next_tick(name):
    make, model, batch = CASES[name]
    make(batch + 1)
    runner = DutyRunner("cleaner", [_duty(name)])
    runner.tick()
    assert model.objects.count() == 1
    said_more = DutyLease.objects.get(pk=name).last_result.get("more")
    runner.tick()  # due at once, not a minute later
    assert model.objects.count() == 0
    assert said_more is True
    assert DutyLease.objects.get(pk=name).last_result["more"] is False

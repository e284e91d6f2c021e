"""The per-Operation retry policy: a failed attempt with attempts left is retried after the
Operation's ``retry_delay`` (1 s, fixed, by default) on the store clock, grown by
``backoff_coefficient`` and capped at ``max_retry_delay``; bad policies fail at import."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db.models.functions import Now

from headgate_django import DefinitionError, durable, testing
from headgate_django.kernel.backoff import policy_delay_ms
from headgate_django.models import Job
from tests.durable.helpers import drive, op_job, start, types, view

pytestmark = pytest.mark.django_db


@durable.operation("retry-default", version="1")
def fails_twice(ctx: Any, _: Any) -> str:
    if ctx.attempt <= 2:
        raise ConnectionError(f"attempt {ctx.attempt}")
    return "ok"


@durable.operation(
    "retry-growing",
    version="1",
    max_attempts=5,
    retry_delay=timedelta(seconds=2),
    backoff_coefficient=3,
    max_retry_delay=timedelta(seconds=10),
)
def always_fails(ctx: Any, _: Any) -> str:
    raise ValueError("no")


@durable.workflow("retry-call", version="1")
def call(ctx: durable.Context, name: str) -> Any:
    return ctx.execute_operation(name, "1").result()


def _fail_once(job_id: str) -> float:
    """Run the due attempt of ``job_id``; return how long after its failure the next is due."""
    Job.objects.filter(pk=job_id, state="retryable").update(state="available", scheduled_at=Now())
    while testing.run_one() is not None:
        if Job.objects.filter(pk=job_id, state="retryable").exists():
            break
    job = Job.objects.get(pk=job_id)
    assert job.state == "retryable"
    return (job.scheduled_at - datetime.fromisoformat(job.errors[-1]["at"])).total_seconds()


def test_by_default_a_failed_operation_is_retried_after_a_fixed_second() -> None:
    wf = start("retry-call", "retry-default")
    job_id = f"{wf}:op:1"
    waits = [_fail_once(job_id), _fail_once(job_id)]
    # Not the queue's exponential backoff: one second each time, on the store clock.
    assert all(1.0 <= w < 1.2 for w in waits), waits
    assert op_job(wf).errors[-1]["exception"] == "builtins.ConnectionError"
    drive()
    assert view(wf).result == "ok"
    assert "OperationFailed" not in types(wf)


def test_a_backoff_coefficient_grows_the_delay_up_to_its_cap() -> None:
    wf = start("retry-call", "retry-growing")
    job_id = f"{wf}:op:1"
    waits = [_fail_once(job_id) for _ in range(4)]
    for wait, expected in zip(waits, [2, 6, 10, 10], strict=True):
        assert expected <= wait < expected + 0.2, waits
    drive()
    assert view(wf).state == "failed"
    assert "ValueError: no (after 5 attempt(s))" in view(wf).failure_reason


def test_the_policy_delay() -> None:
    assert [policy_delay_ms(n, delay_ms=1000, coefficient=1, cap_ms=None) for n in (1, 2, 9)] == [
        1000,
        1000,
        1000,
    ]
    assert [policy_delay_ms(n, delay_ms=100, coefficient=2, cap_ms=500) for n in (1, 2, 3, 4)] == [
        100,
        200,
        400,
        500,
    ]
    assert policy_delay_ms(10_000, delay_ms=1, coefficient=2, cap_ms=None) == 2**20


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_delay": timedelta(0)}, "retry_delay must be a timedelta of at least 1 ms"),
        ({"retry_delay": 5}, "retry_delay must be a timedelta"),
        ({"backoff_coefficient": 0.5}, "backoff_coefficient must be a number from 1 to 100"),
        ({"backoff_coefficient": True}, "backoff_coefficient must be a number"),
        (
            {"retry_delay": timedelta(seconds=5), "max_retry_delay": timedelta(seconds=1)},
            "max_retry_delay must be a timedelta no shorter than retry_delay",
        ),
        (
            # 1 s x 100**6 before the 8th attempt: some 31,700 years, past any date a
            # database keeps; the retry could not be scheduled
            {"max_attempts": 8, "backoff_coefficient": 100},
            "the delay before attempt 8 would be over 36500 days: set max_retry_delay",
        ),
        (
            {"max_attempts": 50, "backoff_coefficient": 100},
            "the delay before attempt 50 would be over 36500 days",
        ),
    ],
)
def test_a_bad_retry_policy_fails_at_import(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        durable.operation("retry-bad", version="1", **options)

"""Durable workflows and Operations for the tests that run real worker processes.

Worker subprocesses import this module when ``AUTODISCOVER_MODULES`` names it (see
``tests/durable/test_workers.py``); the test process imports it directly.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from headgate_django import durable
from tests.app.models import Execution


def _record(ctx: Any) -> int:
    Execution.objects.create(
        job_id=ctx.job_id, label=ctx.execution_key, attempt=ctx.attempt, fence=0, pid=os.getpid()
    )
    return Execution.objects.filter(job_id=ctx.job_id).count()


@durable.operation("it-step", version="1")
def step(ctx: Any, value: Any) -> Any:
    _record(ctx)
    return value


@durable.operation("it-text", version="1")
def text(ctx: Any, size: int) -> str:
    _record(ctx)
    return "t" * size


@durable.workflow("it-call-text", version="1")
def call_text(ctx: durable.Context, size: int) -> Any:
    error = ctx.execute_operation("it-text", "1", size).exception()
    return {"error": str(error)} if error is not None else "kept"


@durable.operation("it-crash-once", version="1")
def crash_once(ctx: Any, marker: str) -> Any:
    """Hangs on its first attempt (the test kills the worker); the next attempt returns."""
    if _record(ctx) == 1:
        while not ctx.cancelled:
            time.sleep(0.05)
        return None
    return {"recovered": marker}


@durable.workflow("it-two-steps", version="1")
def two_steps(ctx: durable.Context, marker: str) -> Any:
    before = ctx.execute_operation("it-step", "1", "before").result()
    after = ctx.execute_operation("it-crash-once", "1", marker).result()
    return [before, after]


@durable.workflow("it-steps", version="1")
def steps(ctx: durable.Context, count: int) -> Any:
    return [ctx.execute_operation("it-step", "1", n).result() for n in range(count)]


@durable.operation("it-long", version="1")
def long(ctx: Any, seconds: float) -> str:
    """Outlives several leases: only heartbeats keep it."""
    _record(ctx)
    time.sleep(seconds)
    return "ok"


@durable.operation("it-wait-cancel", version="1")
def wait_cancel(ctx: Any, _: Any) -> str:
    """First attempt: waits to be cancelled (the test takes its lease) and says whether it
    was. Later attempts return at once."""
    if _record(ctx) == 1:
        cancelled = ctx.wait_cancelled(30)
        Execution.objects.create(
            job_id=ctx.job_id, label=f"cancelled:{cancelled}", attempt=ctx.attempt, fence=0
        )
        return "late"
    return "second"


@durable.workflow("it-call", version="1")
def call(ctx: durable.Context, args: list[Any]) -> Any:
    name, value = args
    return ctx.execute_operation(name, "1", value).result()


@durable.workflow("it-long-steps", version="1")
def long_steps(ctx: durable.Context, args: list[Any]) -> Any:
    """``count`` sequential ``it-long`` Operations of ``seconds`` each."""
    count, seconds = args
    return [ctx.execute_operation("it-long", "1", seconds).result() for _ in range(count)]


@durable.workflow("it-long-or-signal", version="1")
def long_or_signal(ctx: durable.Context, seconds: float) -> Any:
    """Waits for a long Operation or the signal ``stop``, whichever comes first."""
    return ctx.select(ctx.start_operation("it-long", "1", seconds), ctx.wait_signal("stop"))


@durable.operation("it-side", version="1", queue="side")
def side(ctx: Any, value: Any) -> Any:
    _record(ctx)
    return value


@durable.workflow("it-side-call", version="1")
def side_call(ctx: durable.Context, value: Any) -> Any:
    return ctx.execute_operation("it-side", "1", value).result()


@durable.operation("it-lease-watch", version="1")
def lease_watch(ctx: Any, seconds: float) -> dict[str, Any]:
    """Samples its own job's lease expiry for ``seconds``: every renewal sets it to the
    store clock plus the lease, so the distinct values date the renewals on that clock."""
    from django.db import connection

    from headgate_django.store import vendor as v

    expiries: list[str] = []
    deadline = time.monotonic() + seconds
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                f"SELECT claimed_at, lease_expires_at, {v.now(connection)} FROM headgate_job "
                "WHERE id = %s",
                [ctx.job_id],
            )
            claimed, expires, now = (v.parse_instant(connection, x) for x in cursor.fetchone())
            if not expiries or expiries[-1] != expires.isoformat():
                expiries.append(expires.isoformat())
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    return {"claimed_at": claimed.isoformat(), "expiries": expiries, "end": now.isoformat()}


@durable.workflow("it-facts-around-op", version="1")
def facts_around_op(ctx: durable.Context, _: Any) -> Any:
    """A timer comes due and a signal arrives while an Operation runs."""
    timer = ctx.sleep(timedelta(milliseconds=200))
    signal = ctx.wait_signal("go")
    result = ctx.execute_operation("it-long", "1", 2.0).result()
    return [result, timer.ready, signal.ready, signal.result() if signal.ready else None]


def _hang_once(label: str) -> None:
    """The first time: note ``label`` and hang (the test kills this worker); later: go on.

    Called from workflow code only to stop a replay pass between its decision and its
    commit: real workflow code never does I/O.
    """
    if Execution.objects.filter(label=label).exists():
        return
    Execution.objects.create(job_id=label, label=label, attempt=0, fence=0, pid=os.getpid())
    while True:
        time.sleep(0.05)


@durable.workflow("it-child", version="1")
def child(ctx: durable.Context, value: Any) -> Any:
    return ctx.execute_operation("it-step", "1", value).result()


@durable.workflow("it-parent-killed", version="1")
def parent_killed(ctx: durable.Context, marker: str) -> Any:
    """Decides to start a child, then hangs before the pass commits (first run only)."""
    handle = ctx.start_child("it-child", marker, version="1")
    _hang_once(f"decided:{ctx.workflow_id}")
    return handle.result()


@durable.workflow("it-parent-of-two-steps", version="1")
def parent_of_two_steps(ctx: durable.Context, marker: str) -> Any:
    return ctx.child("it-two-steps", marker, version="1")

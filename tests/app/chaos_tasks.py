"""The chaos run's workload (``tests/chaos``): plain jobs, DAG nodes, and a durable workflow
with Operations, a timer and a signal.

Worker subprocesses import this module when ``AUTODISCOVER_MODULES`` names it. Every
handler records its execution (job id, attempt, fence) in ``tests.app.Execution`` and makes
one fenced write that names its fence, so the run can tell afterwards which attempt wrote
what: the last fenced write and the completion of a job must both carry the job's final
fence, or a stale attempt landed a write.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from datetime import timedelta
from typing import Any

from headgate_django import durable, task
from tests.app.models import Execution

#: The longest a handler works before it returns, in seconds: long enough that a kill
#: often lands while handlers are running, short enough that the queue drains quickly.
MAX_WORK = 0.2
#: How long a handler may still be talking to the database after its progress write is
#: visible to others. The write commits inside ``transaction.atomic()``, and on
#: MySQL/MariaDB Django then turns the session's autocommit back on: one more round trip,
#: which a session killed at that moment fails, failing the attempt. Tests that cut the
#: database off under handlers "past their last query" wait this long after the write.
AFTER_LAST_WRITE = 0.3


def _record(ctx: Any, label: str) -> int:
    fence = ctx.lease.fence
    Execution.objects.create(
        job_id=ctx.job_id,
        label=label,
        attempt=ctx.attempt,
        fence=fence,
        worker=ctx.worker_id,
        pid=os.getpid(),
    )
    # The fenced write: refused (LeaseLostError) once this attempt lost its lease.
    ctx.set_progress(1, 1, f"fence:{fence}")
    time.sleep(random.uniform(0, MAX_WORK))
    return fence


@task(kind="chaos.job")
def chaos_job(ctx: Any, n: int) -> dict[str, int]:
    return {"n": n, "fence": _record(ctx, "job")}


@task(kind="chaos.node")
def chaos_node(ctx: Any, workflow: int, node: str) -> dict[str, Any]:
    return {"node": node, "fence": _record(ctx, "node")}


def operation_value(n: int, step: int) -> int:
    """What Operation ``step`` of durable workflow ``n`` returns (the expected result is
    computed from it)."""
    return n * 10 + step


def expected_result(n: int) -> dict[str, Any]:
    return {"n": n, "ops": [operation_value(n, s) for s in (1, 2, 3)], "signal": f"go-{n}"}


@durable.operation("chaos-op", version="1")
def chaos_op(ctx: Any, spec: dict[str, int]) -> int:
    Execution.objects.create(
        job_id=ctx.job_id, label="op", attempt=ctx.attempt, fence=0, pid=os.getpid()
    )
    time.sleep(random.uniform(0, MAX_WORK))
    return operation_value(spec["n"], spec["step"])


@durable.workflow("chaos-durable", version="1")
def chaos_durable(ctx: durable.Context, n: int) -> dict[str, Any]:
    """Two Operations in parallel, a short durable timer, a signal raced against a long
    timer (the signal is sent at start, so it must win), then a third Operation."""
    first = ctx.start_operation("chaos-op", "1", {"n": n, "step": 1})
    second = ctx.start_operation("chaos-op", "1", {"n": n, "step": 2})
    ops = [first.result(), second.result()]
    ctx.sleep(timedelta(milliseconds=500)).result()
    go = ctx.wait_signal("go")
    if ctx.select(go, ctx.sleep(timedelta(minutes=30))) != 0:
        return {"n": n, "ops": ops, "signal": None}
    ops.append(ctx.execute_operation("chaos-op", "1", {"n": n, "step": 3}).result())
    return {"n": n, "ops": ops, "signal": go.result()}


@task(kind="chaos.slow")
def chaos_slow(ctx: Any, seconds: float) -> dict[str, int]:
    """Works ``seconds`` without touching the database after its first writes, so it can
    finish while the database is down (the outage check): its completion must land later."""
    fence = _record(ctx, "slow")
    ctx.wait_cancelled(seconds)
    return {"fence": fence}


@task(kind="chaos.drops_session")
def chaos_drops_session(ctx: Any, in_transaction: bool = False) -> int:
    """Ends its own database session the first time it runs, then uses it: what a handler
    meets when the server restarts or kills its session before the worker has noticed.

    ``in_transaction``: the session dies inside ``transaction.atomic()``, whose rollback
    then fails too, so Django drops the connection before the worker looks at it.
    """
    from django.db import connection, transaction

    runs = Execution.objects.filter(job_id=ctx.job_id).count()
    Execution.objects.create(
        job_id=ctx.job_id,
        label="drops",
        attempt=ctx.attempt,
        fence=ctx.lease.fence,
        worker=ctx.worker_id,
        pid=os.getpid(),
    )
    if runs == 0:
        block = transaction.atomic() if in_transaction else contextlib.nullcontext()
        with block, connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            else:
                cursor.execute("KILL CONNECTION CONNECTION_ID()")
    return runs

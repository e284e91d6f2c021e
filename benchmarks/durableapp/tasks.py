"""What ``benchmarks/durable.py`` runs: a no-op Operation, workflows of sequential
Operations, and the baseline — plain jobs where each one enqueues the next."""

from __future__ import annotations

from typing import Any

from headgate_django import durable, task


@durable.operation("bench-noop", version="1")
def noop(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("bench-sequence", version="1")
def sequence(ctx: durable.Context, count: int) -> int:
    for n in range(count):
        ctx.execute_operation("bench-noop", "1", n).result()
    return count


@task(kind="bench.durable-chain")
def chain(ctx: Any, left: int) -> int:
    if left > 1:
        chain.enqueue(left - 1)
    return left

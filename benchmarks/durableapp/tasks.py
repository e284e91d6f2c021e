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


@durable.workflow("bench-loop", version="1")
def loop(ctx: durable.Context, state: dict[str, int]) -> int:
    """``total`` iterations of one Operation, continuing as new every ``every`` of them."""
    i = state["i"]
    for _ in range(state["every"]):
        if i == state["total"]:
            return i
        i = ctx.execute_operation("bench-noop", "1", i).result() + 1
    ctx.continue_as_new({**state, "i": i})

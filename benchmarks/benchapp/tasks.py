"""The benchmark's handlers: one that does nothing, one that stamps its start time."""

from __future__ import annotations

import time

from headgate_django import task


@task(kind="bench.noop")
def noop(ctx) -> None:  # type: ignore[no-untyped-def]
    return None


@task(kind="bench.stamp")
def stamp(ctx, t0: float) -> list[float]:  # type: ignore[no-untyped-def]
    """Return (enqueue time, start time), both from ``time.time()`` on this machine."""
    return [t0, time.time()]


@task(kind="bench.chain")
def chain(ctx, left: int) -> None:  # type: ignore[no-untyped-def]
    """A chain of plain jobs: each enqueues the next (the baseline for a workflow chain)."""
    if left > 1:
        from headgate_django import enqueue

        enqueue(chain.envelope(left=left - 1))


@task(kind="bench.sleep")
def sleep(ctx, seconds: float) -> float:  # type: ignore[no-untyped-def]
    """A job that takes ``seconds`` (benchmarks/wait.py)."""
    time.sleep(seconds)
    return seconds

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

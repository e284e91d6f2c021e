"""Durable definitions the console tests drive (registered at import, like a project's
``tasks.py``). Names are prefixed ``console`` so they never meet other suites'."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from headgate_django import durable


@durable.operation("console-unsure", version="1")
def unsure(ctx: Any, _: Any) -> str:
    raise durable.Uncertain("the bank did not answer")


@durable.operation("console-ship", version="1")
def ship(ctx: Any, order: Any) -> dict[str, Any]:
    return {"shipped": order}


@durable.workflow("console-pay", version="1")
def pay(ctx: durable.Context, order: Any) -> Any:
    return ctx.execute_operation("console-unsure", "1", order).result()


@durable.workflow("console-ship", version="1")
def ship_after_go(ctx: durable.Context, order: Any) -> Any:
    go = ctx.wait_signal("go")
    ctx.select(go)
    return ctx.execute_operation("console-ship", "1", order).result()


@durable.workflow("console-rounds", version="1")
def rounds(ctx: durable.Context, run: int) -> Any:
    """Run 1 continues as new; run 2 waits for a signal or an hour, whichever comes first."""
    if run == 1:
        ctx.continue_as_new(2)
    return ctx.select(ctx.wait_signal("stop"), ctx.sleep(timedelta(hours=1)))


@durable.workflow("console-parent", version="1")
def parent(ctx: durable.Context, order: Any) -> Any:
    return ctx.child("console-ship", order, version="1")

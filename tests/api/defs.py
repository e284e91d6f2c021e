"""Tasks and durable definitions the API tests drive (registered at import, like a
project's ``tasks.py``). Names are prefixed ``api`` so they never meet other suites'."""

from __future__ import annotations

from typing import Any

from headgate_django import durable, task


@task(kind="test.api.welcome", schema_version=2)
def send_welcome(ctx: Any, **kwargs: Any) -> dict[str, Any]:
    return kwargs


@durable.operation("api-unsure", version="1")
def unsure(ctx: Any, _: Any) -> str:
    raise durable.Uncertain("the bank did not answer")


@durable.workflow("api-wait", version="1")
def wait_for_go(ctx: durable.Context, order: Any) -> Any:
    go = ctx.wait_signal("go")
    ctx.select(go)
    return {"order": order, "go": go.result()}


@wait_for_go.query("notes")
def notes(ctx: durable.Context, *prefix: Any) -> Any:
    return [*prefix, *ctx.state.get("notes", [])]


def _not_blank(ctx: durable.Context, text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a note is a non-blank string")


@wait_for_go.update("note", validator=_not_blank)
def note(ctx: durable.Context, text: str) -> int:
    ctx.state.setdefault("notes", []).append(text)
    return len(ctx.state["notes"])


@durable.workflow("api-unsure", version="1")
def call_unsure(ctx: durable.Context, _: Any) -> Any:
    return ctx.execute_operation("api-unsure", "1", None).result()


@durable.workflow("api-loop", version="1")
def loop(ctx: durable.Context, run: int) -> Any:
    if run < 3:
        ctx.continue_as_new(run + 1)
    return run


@durable.workflow("api-parent", version="1")
def parent(ctx: durable.Context, _: Any) -> Any:
    return ctx.child("api-wait", "child", version="1")

"""OpenTelemetry tracing (optional: ``pip install "headgate-django[otel]"``).

With ``opentelemetry-api`` installed, ``enqueue`` records the caller's current W3C trace
context (``traceparent``, ``tracestate``) in each job it stores, and every attempt runs in
a span ``headgate.job <kind>`` (kind CONSUMER; attributes ``headgate.job.id``, ``.kind``,
``.queue``, ``.attempt`` and ``.outcome``). The spans go wherever the application's tracer
provider sends them.

A plain job's attempt starts a trace of its own, linked to the span that enqueued it: a
job can outlive its request by days and run many times, and one trace per attempt keeps
traces small. An attempt of a job that belongs to a workflow (its nodes and coordinator)
or to a durable execution (its passes and Operations) is a *child* of the context its job
carries, so the whole run is one trace: the request that started it, each pass, and each
Operation inside the pass that scheduled it (:mod:`headgate_django.store.tracing` gives
the library's own inserts the current context).

Without the package :data:`ENABLED` is False, decided once at import (without importing
it); every caller tests it before doing anything else, so a plain job pays one boolean
test per enqueue and per attempt. OpenTelemetry itself is imported only once the
application has imported its API (it must, to set a tracer provider): a process of a
project that does not trace never pays that import. With the package but no tracer
provider configured (OpenTelemetry's proxy default), :func:`active` is False too: spans
would go nowhere, so none are made and no context is read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from importlib.util import find_spec
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

try:
    ENABLED = find_spec("opentelemetry.trace") is not None
except (ImportError, ValueError):  # tracing is optional
    ENABLED = False
_API = "opentelemetry.trace"

if TYPE_CHECKING:
    from headgate_django.context import JobContext

T = TypeVar("T")
TRACER = "headgate_django"


@cache
def _otel() -> tuple[ModuleType, ModuleType, ModuleType]:
    """OpenTelemetry's ``trace``, ``propagate`` and ``context`` modules, on first use."""
    from opentelemetry import context, propagate, trace

    return trace, propagate, context


def active() -> bool:
    """Whether spans go anywhere: the package is there and a tracer provider was set."""
    if not ENABLED or _API not in sys.modules:  # nobody imported the API: no provider
        return False
    trace = _otel()[0]
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers; None outside a recording-or-sampled span."""
    if not ENABLED or _API not in sys.modules:  # no span can be current without the API
        return None
    trace, propagate, _ = _otel()
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers if "traceparent" in headers else None


def _links(parent: dict[str, str] | None) -> list[Any]:
    if not parent:
        return []
    trace, propagate, _ = _otel()
    span = trace.get_current_span(propagate.extract(parent))
    context = span.get_span_context()
    return [trace.Link(context)] if context.is_valid else []


def _start(ctx: JobContext) -> Any:
    trace, propagate, otel_context = _otel()
    tracer = trace.get_tracer(TRACER)
    parent = ctx.trace_parent
    nested = parent is not None and ctx.workflow_id is not None
    return tracer.start_span(
        f"headgate.job {ctx.kind}",
        kind=trace.SpanKind.CONSUMER,
        links=[] if nested else _links(parent),
        attributes={
            "headgate.job.id": ctx.job_id,
            "headgate.job.kind": ctx.kind,
            "headgate.job.queue": ctx.queue,
            "headgate.job.attempt": ctx.attempt,
        },
        # Never a child of whatever the worker thread happens to have current: of the
        # carried context for a workflow's job, else a new trace linked to the enqueue's.
        context=propagate.extract(parent) if nested else otel_context.Context(),
    )


def traced(ctx: JobContext, run: Callable[[], T], label: Callable[[T], str]) -> T:
    """``run()`` inside the attempt's span (current, so the handler's spans nest in it)."""
    span = _start(ctx)
    try:
        with _otel()[0].use_span(span, end_on_exit=False, record_exception=True):
            outcome = run()
        span.set_attribute("headgate.job.outcome", label(outcome))
        return outcome
    finally:
        span.end()


@contextmanager
def batch_spans(ctxs: Sequence[JobContext]) -> Iterator[Callable[[Sequence[str]], None]]:
    """One span per member of a batch call; the caller reports the outcomes' labels."""
    spans = [_start(ctx) for ctx in ctxs]

    def outcomes(labels: Sequence[str]) -> None:
        for span, text in zip(spans, labels, strict=True):
            span.set_attribute("headgate.job.outcome", text)

    try:
        yield outcomes
    finally:
        for span in spans:
            span.end()

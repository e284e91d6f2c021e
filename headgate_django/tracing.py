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

Without the package :data:`ENABLED` is False, decided once at import; every caller tests
it before doing anything else, so a plain job pays one boolean test per enqueue and per
attempt. With the package but no tracer provider configured (OpenTelemetry's proxy
default), :func:`active` is False too: spans would go nowhere, so none are made and no
context is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # tracing is optional
    ENABLED = False
else:
    ENABLED = True

if TYPE_CHECKING:
    from headgate_django.context import JobContext

T = TypeVar("T")
TRACER = "headgate_django"


def active() -> bool:
    """Whether spans go anywhere: the package is there and a tracer provider was set."""
    return ENABLED and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers; None outside a recording-or-sampled span."""
    if not ENABLED or not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers if "traceparent" in headers else None


def _links(parent: dict[str, str] | None) -> list[Any]:
    if not parent:
        return []
    span = trace.get_current_span(propagate.extract(parent))
    context = span.get_span_context()
    return [trace.Link(context)] if context.is_valid else []


def _start(ctx: JobContext) -> Any:
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
        with trace.use_span(span, end_on_exit=False, record_exception=True):
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

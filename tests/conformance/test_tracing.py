"""OpenTelemetry: ``enqueue`` under a span stores its W3C trace context in the job, and
each attempt runs in a span (kind, queue, attempt, outcome) linked to it; a workflow's and
a durable execution's attempts nest into the trace that started them; without a span
nothing is stored; without the package nothing runs at all."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk (the dev extra)")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from headgate_django import Skip, durable, enqueue, task, testing
from headgate_django.models import Job
from headgate_django.store.durable_jobs import OP_KIND, TASK_KIND
from headgate_django.worker.runner import Worker
from headgate_django.workflows import Workflow, WorkflowGraft
from tests.conformance.helpers import fresh_queue
from tests.conftest import fresh_python

pytestmark = pytest.mark.django_db
EXPORTER = InMemorySpanExporter()


@pytest.fixture(autouse=True)
def spans():
    """The process's tracer provider, set once (OpenTelemetry allows no second one)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@task(kind="test.trace.work")
def work(ctx, skip: bool = False):
    if skip:
        raise Skip("not now")
    with trace.get_tracer("test").start_as_current_span("inside"):
        return {"ok": True}


@task(kind="test.trace.batch", batch_size=5)
def batched(members):
    return {m.job_id: m.kwargs["n"] for m in members}


@durable.operation("test-trace-charge", version="1")
def charge(ctx, order):
    with trace.get_tracer("test").start_as_current_span("provider"):
        return {"charged": order["cents"]}


@durable.workflow("test-trace-checkout", version="1")
def checkout(ctx, order):
    first = ctx.execute_operation("test-trace-charge", "1", order).result()
    second = ctx.execute_operation("test-trace-charge", "1", order).result()
    return [first, second]


@durable.workflow("test-trace-parent", version="1")
def trace_parent(ctx, order):
    return ctx.child("test-trace-checkout", order, version="1")


def job_spans(exporter):
    return [s for s in exporter.get_finished_spans() if s.name.startswith("headgate.job ")]


def test_the_enqueue_context_is_stored_and_the_attempt_span_links_to_it(spans):
    with trace.get_tracer("test").start_as_current_span("request") as request:
        job_id = work.enqueue()
    stored = Job.objects.get(pk=job_id).trace_context
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert stored["traceparent"].split("-")[1] == trace_id
    assert testing.run_one() == (job_id, "completed")
    (span,) = job_spans(spans)
    assert span.name == "headgate.job test.trace.work"
    assert span.kind is trace.SpanKind.CONSUMER
    assert dict(span.attributes) == {
        "headgate.job.id": job_id,
        "headgate.job.kind": "test.trace.work",
        "headgate.job.queue": "default",
        "headgate.job.attempt": 1,
        "headgate.job.outcome": "succeeded",
    }
    assert [link.context.trace_id for link in span.links] == [request.get_span_context().trace_id]
    assert span.context.trace_id != request.get_span_context().trace_id  # linked, not a child
    (inside,) = [s for s in spans.get_finished_spans() if s.name == "inside"]
    assert inside.parent.span_id == span.context.span_id  # the handler's spans nest in it


@pytest.mark.parametrize("deferred", [False, True], ids=["now", "run_after"])
def test_a_django_task_enqueued_under_a_span_carries_its_context(spans, deferred):
    """A task deferred with ``using(run_after=…)`` is written with what no column keeps,
    through another insert, which stored no trace context."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.app import django_tasks_defs as defs

    task = defs.add.using(run_after=timezone.now() + timedelta(hours=1)) if deferred else defs.add
    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = task.enqueue(1, 2)
    stored = Job.objects.get(pk=result.id).trace_context
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert stored["traceparent"].split("-")[1] == trace_id


def test_no_current_span_stores_nothing_and_the_span_has_no_link(spans):
    job_id = work.enqueue(skip=True)
    assert Job.objects.get(pk=job_id).trace_context is None
    testing.run_one()
    (span,) = job_spans(spans)
    assert span.links == () or list(span.links) == []
    assert span.attributes["headgate.job.outcome"] == "skipped"


@pytest.mark.django_db(transaction=True)
def test_a_worker_traces_each_member_of_a_batch(spans):
    q = fresh_queue()
    with trace.get_tracer("test").start_as_current_span("producer") as producer:
        ids = enqueue([replace(batched.envelope(n=n), queue=q) for n in range(3)])
    Worker(queues=[q], concurrency=4, burst=True, run_duties=False).run()
    found = {s.attributes["headgate.job.id"]: s for s in job_spans(spans)}
    assert set(found) == set(ids)
    for span in found.values():
        assert span.attributes["headgate.job.outcome"] == "succeeded"
        assert span.links[0].context.trace_id == producer.get_span_context().trace_id


def _trace(span) -> int:
    return span.get_span_context().trace_id


def test_a_workflows_attempts_nest_in_the_trace_that_enqueued_it(spans):
    flow = (
        Workflow("trace-flow")
        .add("a", work.envelope(), [])
        .add("b", work.envelope(), ["a"])
        .add_signal("hold", "done", ["b"])
    )
    with trace.get_tracer("test").start_as_current_span("request") as request:
        enqueue(flow.prepare())
    testing.run_jobs(include_scheduled=True)
    nodes = {s.attributes["headgate.job.id"]: s for s in job_spans(spans)}
    assert {"trace-flow:a", "trace-flow:b"} <= set(nodes)
    for span in nodes.values():  # nodes and the coordinator: children, not linked traces
        assert span.context.trace_id == _trace(request)
        assert span.parent.span_id == request.get_span_context().span_id
        assert list(span.links) == []

    # A graft submitted under another span: its node nests there.
    with trace.get_tracer("test").start_as_current_span("operator") as operator:
        enqueue(WorkflowGraft("trace-flow", 1).add("c", work.envelope(), ["b"]).prepare())
    spans.clear()
    testing.run_jobs(include_scheduled=True)
    (grafted,) = [s for s in job_spans(spans) if s.attributes["headgate.job.id"] == "trace-flow:c"]
    assert grafted.context.trace_id == _trace(operator)
    assert grafted.parent.span_id == operator.get_span_context().span_id


def test_a_durable_execution_is_one_trace_with_operations_inside_their_pass(spans):
    with trace.get_tracer("test").start_as_current_span("request") as request:
        workflow_id = durable.Client().start("test-trace-checkout", "1", {"cents": 5}).workflow_id
    for _ in range(10):
        if not testing.run_jobs().outcomes:
            break
    assert durable.Manager().get(workflow_id).result == [{"charged": 5}, {"charged": 5}]
    finished = spans.get_finished_spans()
    passes = [s for s in job_spans(spans) if s.attributes["headgate.job.kind"] == TASK_KIND]
    ops = [s for s in job_spans(spans) if s.attributes["headgate.job.kind"] == OP_KIND]
    assert len(passes) == 3 and len(ops) == 2
    assert {s.context.trace_id for s in finished} == {_trace(request)}
    pass_ids = {s.context.span_id for s in passes}
    for span in passes:  # every pass runs the one task job, started under the request
        assert span.parent.span_id == request.get_span_context().span_id
    for span in ops:  # each Operation inside the pass that scheduled it
        assert span.parent.span_id in pass_ids
    assert ops[0].parent.span_id != ops[1].parent.span_id
    providers = [s for s in finished if s.name == "provider"]
    assert {s.parent.span_id for s in providers} == {s.context.span_id for s in ops}


def test_a_child_execution_nests_into_the_parents_pass_that_started_it(spans):
    with trace.get_tracer("test").start_as_current_span("request") as request:
        workflow_id = durable.Client().start("test-trace-parent", "1", {"cents": 3}).workflow_id
    for _ in range(10):
        if not testing.run_jobs().outcomes:
            break
    assert durable.Manager().get(workflow_id).result == [{"charged": 3}, {"charged": 3}]
    passes = [s for s in job_spans(spans) if s.attributes["headgate.job.kind"] == TASK_KIND]
    parent_passes = [s for s in passes if s.parent.span_id == request.get_span_context().span_id]
    child_passes = [s for s in passes if s not in parent_passes]
    assert parent_passes and child_passes
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {_trace(request)}
    starter = {s.parent.span_id for s in child_passes}
    assert len(starter) == 1 and starter <= {s.context.span_id for s in parent_passes}


@pytest.mark.django_db(transaction=True)
def test_a_worker_nests_operations_it_runs_inside_the_pass(spans):
    """A worker runs an Operation on the pass's own thread (eagerly): still inside it."""
    with trace.get_tracer("test").start_as_current_span("request") as request:
        workflow_id = durable.Client().start("test-trace-checkout", "1", {"cents": 7}).workflow_id
    Worker(concurrency=2, burst=True, run_duties=False).run()
    assert durable.Manager().get(workflow_id).state == "succeeded"
    passes = [s for s in job_spans(spans) if s.attributes["headgate.job.kind"] == TASK_KIND]
    ops = [s for s in job_spans(spans) if s.attributes["headgate.job.kind"] == OP_KIND]
    assert len(ops) == 2 and passes
    assert {s.context.trace_id for s in passes + ops} == {_trace(request)}
    assert {s.parent.span_id for s in ops} <= {s.context.span_id for s in passes}


def test_a_durable_execution_started_outside_a_span_carries_no_context(spans):
    workflow_id = durable.Client().start("test-trace-checkout", "1", {"cents": 1}).workflow_id
    assert (
        not Job.objects.filter(workflow_id=f"durable:{workflow_id}")
        .filter(trace_context__isnull=False)
        .exists()
    )


def test_a_rolled_back_enqueue_leaves_no_job_and_no_context():
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic():
        with trace.get_tracer("test").start_as_current_span("request"):
            job_id = work.enqueue()
        raise RuntimeError("roll back")
    assert not Job.objects.filter(pk=job_id).exists()


def test_without_the_package_tracing_is_off_and_costs_no_import():
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import headgate_django.tracing as t\n"
        "assert t.ENABLED is False and t.carrier() is None\n"
        "assert not any(m.startswith('opentelemetry.') for m in sys.modules)\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr


def test_a_project_that_does_not_trace_never_imports_opentelemetry():
    """The package installed, the application not using it: headgate does not import it
    (about 15 ms at every process start) for its checks."""
    code = (
        "import sys\n"
        "import headgate_django.tracing as t\n"
        "assert t.ENABLED is True and t.active() is False and t.carrier() is None\n"
        "assert not any(m.startswith('opentelemetry.') for m in sys.modules), sorted(\n"
        "    m for m in sys.modules if m.startswith('opentelemetry'))\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr


def test_with_the_package_but_no_tracer_provider_nothing_is_traced():
    code = (
        "import opentelemetry.trace\n"
        "import headgate_django.tracing as t\n"
        "assert t.ENABLED is True and t.active() is False and t.carrier() is None\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr

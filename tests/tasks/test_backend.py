"""Conformance of HeadgateBackend with what Django asks of a Tasks backend: enqueue,
defer, priority, queue validation, get_result states, errors, async tasks, context."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from headgate_django import testing
from headgate_django.models import Job
from headgate_django.store import db_now
from headgate_django.tasks import HeadgateBackend
from tests.app import django_tasks_defs as defs

try:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

pytestmark = pytest.mark.django_db


def test_backend_capabilities():
    backend = task_backends["default"]
    assert isinstance(backend, HeadgateBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_enqueue_writes_a_ready_job_and_runs():
    result = defs.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    job = Job.objects.get(pk=result.id)
    assert job.kind == defs.add.module_path and job.queue == "default"
    assert testing.run_jobs().completed == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1
    assert defs.add.get_result(result.id).return_value == 5


def test_priority_and_queue_are_honoured():
    result = defs.send.enqueue("ada@example.com")
    job = Job.objects.get(pk=result.id)
    assert (job.queue, job.priority) == ("emails", 10)


def test_unknown_queue_is_refused():
    with pytest.raises(InvalidTaskError):
        defs.add.using(queue_name="nope").enqueue(1, 2)
    assert Job.objects.count() == 0


def test_defer_with_run_after_uses_the_given_instant():
    when = timezone.now() + timedelta(hours=1)
    result = defs.add.using(run_after=when).enqueue(1, 1)
    job = Job.objects.get(pk=result.id)
    assert job.state == "scheduled"
    assert abs((job.scheduled_at - when).total_seconds()) < 0.01
    assert testing.run_jobs().outcomes == []


def test_errors_and_failed_status():
    result = defs.explode.enqueue()
    Job.objects.filter(pk=result.id).update(max_attempts=1)
    testing.run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 1
    assert "KeyError" in result.errors[0].traceback
    assert result.errors[0].exception_class_path == "builtins.KeyError"
    assert result.errors[0].exception_class is KeyError


def test_context_gets_the_attempt_number():
    result = defs.which_attempt.enqueue(fail_first=True)
    testing.run_jobs(include_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2


def test_async_task_runs():
    result = defs.async_double.enqueue(21)
    testing.run_jobs()
    result.refresh()
    assert result.return_value == 42


def test_extra_decorator_options_are_applied():
    result = defs.limited.enqueue()
    job = Job.objects.get(pk=result.id)
    assert job.max_attempts == 2 and job.retention == timedelta(hours=1)
    testing.run_jobs(include_scheduled=True)
    assert Job.objects.get(pk=result.id).state == "archived"


def test_missing_result():
    with pytest.raises(TaskResultDoesNotExist):
        defs.add.get_result("no-such-id")


def test_signals_are_sent():
    seen: list[tuple[str, str]] = []

    def on(signal_name):
        def receiver(sender, task_result, **kwargs):
            seen.append((signal_name, task_result.status))

        return receiver

    receivers = [on("enqueued"), on("started"), on("finished")]
    task_enqueued.connect(receivers[0])
    task_started.connect(receivers[1])
    task_finished.connect(receivers[2])
    try:
        defs.add.enqueue(1, 2)
        testing.run_jobs()
    finally:
        task_enqueued.disconnect(receivers[0])
        task_started.disconnect(receivers[1])
        task_finished.disconnect(receivers[2])
    assert seen == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.SUCCESSFUL),
    ]


@pytest.mark.django_db(transaction=True)
def test_enqueue_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        defs.add.enqueue(1, 2)
        raise RuntimeError("roll back")
    assert Job.objects.count() == 0


def test_store_clock_stamps_enqueue():
    result = defs.add.enqueue(1, 2)
    assert abs((result.enqueued_at - db_now()).total_seconds()) < 5


def test_a_django_task_is_a_workflow_node():
    from headgate_django import enqueue
    from headgate_django.tasks import task_envelope
    from headgate_django.workflows import Workflow, inspect_workflow

    batch = (
        Workflow("tasks-wf")
        .add("first", task_envelope(defs.add, 1, 2), [])
        .add("second", task_envelope(defs.send, "ops@example.com"), ["first"])
        .prepare()
    )
    enqueue(batch)
    testing.run_jobs()
    snapshot = inspect_workflow("tasks-wf")
    assert snapshot.coordinator_state == "completed"
    assert Job.objects.get(pk="tasks-wf:second").result == "sent to ops@example.com"

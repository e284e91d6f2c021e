"""Django's Tasks contract, as Django documents it, checked against HeadgateBackend.

Written from the framework's documentation (the Task, TaskResult and backend reference),
one behaviour per test: what a task is after ``using()``, what a result says at each stage
and after ``refresh()``, how failures and return values read back, which signals fire with
which status, and which errors are raised for what. Where headgate departs from Django's
built-in backends on purpose (retries), the test says so; the ``once`` alias
(``OPTIONS["MAX_ATTEMPTS"] = 1``) gives Django's run-once semantics.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from headgate_django import Envelope, enqueue, testing
from headgate_django.exceptions import PayloadError
from headgate_django.models import Job
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

LATER = timedelta(hours=2)


@contextmanager
def signals_seen() -> Iterator[list[tuple[str, object]]]:
    seen: list[tuple[str, object]] = []
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receiver(sender, task_result, _name=name, **kwargs):
            seen.append((_name, task_result.status))

        receivers[signal] = receiver
        signal.connect(receiver)
    try:
        yield seen
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)


@contextmanager
def results_sent(*signals: Any) -> Iterator[list[Any]]:
    """The task results ``signals`` carried, in the order they were sent."""
    sent: list[Any] = []

    def receiver(sender, task_result, **kwargs):
        sent.append(task_result)

    for signal in signals:
        signal.connect(receiver)
    try:
        yield sent
    finally:
        for signal in signals:
            signal.disconnect(receiver)


# -- using() round-trips --------------------------------------------------------------
def test_what_using_set_reads_back_from_get_result_and_refresh():
    when = (timezone.now() + LATER).replace(microsecond=123456)
    task = defs.add.using(priority=7, queue_name="emails", run_after=when)
    result = task.enqueue(1, 2)
    for seen in (result.task, defs.add.get_result(result.id).task):
        assert (seen.priority, seen.queue_name, seen.run_after) == (7, "emails", when)
        assert seen.backend == "default" and seen.func is defs.add.func
    result.refresh()
    assert result.task.run_after == when


def test_run_after_survives_a_retry():
    when = timezone.now() + timedelta(milliseconds=1)
    result = defs.explode.using(run_after=when).enqueue()
    testing.run_jobs(include_scheduled=True, max_jobs=1)  # a failure moves the schedule
    assert Job.objects.get(pk=result.id).attempt == 1
    assert defs.explode.get_result(result.id).task.run_after == when


def test_a_task_enqueued_through_another_alias_is_read_back_through_it():
    result = defs.add.using(backend="once").enqueue(2, 2)
    assert result.backend == "once" and result.task.backend == "once"
    again = task_backends["once"].get_result(result.id)
    assert again.task.backend == "once"
    testing.run_jobs()
    result.refresh()  # through the task's backend, the one that holds the job
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 4)


def test_the_running_task_sees_the_fields_it_was_enqueued_with():
    result = defs.describe.using(priority=3, queue_name="emails").enqueue()
    testing.run_jobs()
    result.refresh()
    assert result.return_value == {
        "status": str(TaskResultStatus.RUNNING),
        "queue_name": "emails",
        "priority": 3,
        "backend": "default",
        "started": True,
    }


# -- statuses, timestamps, return values -----------------------------------------------
def test_a_result_moves_ready_then_successful_with_ordered_timestamps():
    result = defs.add.enqueue(20, 22)
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None,) * 3
    assert not result.is_finished and result.attempts == 0
    testing.run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 42
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1 and len(result.worker_ids) == 1


def test_a_return_value_that_is_not_json_fails_with_its_real_class_and_traceback():
    with signals_seen() as seen:
        result = defs.returns_a_set.using(backend="once").enqueue()
        testing.run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert error.exception_class is TypeError
    assert "not JSON-serialisable" in error.traceback
    assert "Traceback (most recent call last)" in error.traceback
    # The signal said what the store holds: never SUCCESSFUL for a value it refused.
    assert seen == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ]


def test_errors_carry_the_exception_class_path():
    result = defs.explode.using(backend="once").enqueue()
    testing.run_jobs()
    result.refresh()
    [error] = result.errors
    assert error.exception_class_path == "builtins.KeyError"
    assert "no such thing" in error.traceback


def test_the_once_alias_gives_django_run_once_semantics():
    result = defs.explode.using(backend="once").enqueue()
    assert Job.objects.get(pk=result.id).max_attempts == 1
    with signals_seen() as seen:
        testing.run_jobs(include_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    assert seen == [("started", TaskResultStatus.RUNNING), ("finished", TaskResultStatus.FAILED)]


def test_headgate_retries_by_default_and_finished_fires_once_at_the_end():
    result = defs.limited.enqueue()  # @task(max_attempts=2)
    with signals_seen() as seen:
        testing.run_jobs(include_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 2
    assert [name for name, _ in seen] == ["started", "started", "finished"]


# -- errors for bad calls --------------------------------------------------------------
def test_arguments_that_are_not_json_raise_type_error_and_store_nothing():
    with pytest.raises(TypeError) as info:
        defs.add.enqueue(datetime.now(), 1)
    assert isinstance(info.value, PayloadError)  # headgate's own class, both at once
    with pytest.raises(TypeError):
        defs.add.enqueue(1, b=object())
    assert Job.objects.count() == 0


def test_bytes_and_tuples_are_passed_as_djangos_own_backends_pass_them():
    """Django normalises a task's arguments and return value to JSON: bytes become UTF-8
    text, tuples lists. headgate refused bytes with ``PayloadNotJSONError``."""
    result = defs.echo_arguments.enqueue(b"caf\xc3\xa9", (1, 2), key=b"value")
    assert result.args == ["café", [1, 2]] and result.kwargs == {"key": "value"}
    done = defs.returns_bytes.enqueue()
    testing.run_jobs()
    result.refresh()
    done.refresh()
    assert result.return_value == [["café", [1, 2]], {"key": "value"}]
    assert done.return_value == "café"
    assert Job.objects.get(pk=done.id).result == "café"


def test_bytes_that_are_not_utf_8_are_refused_and_store_nothing():
    with pytest.raises(TypeError) as info:
        defs.echo_arguments.enqueue(b"\xff")
    assert isinstance(info.value, PayloadError)
    assert Job.objects.count() == 0


def test_a_queue_the_backend_does_not_list_is_refused():
    with pytest.raises(InvalidTaskError):
        defs.add.using(queue_name="elsewhere")
    assert Job.objects.count() == 0


def test_a_bad_max_attempts_option_is_a_configuration_error():
    from django.core.exceptions import ImproperlyConfigured

    from headgate_django.tasks import HeadgateBackend

    with pytest.raises(ImproperlyConfigured, match="MAX_ATTEMPTS"):
        HeadgateBackend("broken", {"OPTIONS": {"MAX_ATTEMPTS": 0}})


# -- async API -------------------------------------------------------------------------
def test_aenqueue_aget_result_and_arefresh():
    result = async_to_sync(defs.add.aenqueue)(5, 6)
    assert result.status == TaskResultStatus.READY
    fetched = async_to_sync(defs.add.aget_result)(result.id)
    assert fetched.id == result.id and fetched.args == [5, 6]
    testing.run_jobs()
    async_to_sync(result.arefresh)()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 11)


# -- transactions ----------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_deferred_enqueue_rolled_back_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        defs.add.using(run_after=timezone.now() + LATER).enqueue(1, 2)
        raise RuntimeError("roll back")
    assert Job.objects.count() == 0


# -- what receivers of task_finished and callers of get_result see -----------------------
def test_a_failed_task_finished_signal_carries_the_error_that_ended_it():
    """As with Django's own backends, the FAILED result sent with ``task_finished`` holds
    the exception that ended the task and when it finished (it said neither: a receiver
    logging ``task_result.errors[-1]`` met an empty list)."""
    with results_sent(task_finished) as finished:
        result = defs.explode.using(backend="once").enqueue()
        testing.run_jobs()
    [sent] = finished
    assert sent.status == TaskResultStatus.FAILED
    assert sent.finished_at is not None and sent.finished_at >= sent.started_at
    [error] = sent.errors
    assert error.exception_class is KeyError
    assert "no such thing" in error.traceback and "Traceback" in error.traceback
    result.refresh()  # what the store recorded says the same
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyError"]


def test_get_result_of_an_id_that_is_no_django_task_raises_does_not_exist():
    """Any id a caller may pass (from a URL, say) gets Django's documented error, not an
    ``ImportError`` from resolving a job kind that names no Task."""
    [job_id] = enqueue(Envelope(kind="test.noop"))
    backend = task_backends["default"]
    for result_id in (job_id, "no-such-job"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        defs.add.get_result(job_id)


def test_bad_headgate_options_on_a_task_are_django_invalid_task_errors():
    """``validate_task`` refuses with Django's ``InvalidTask`` (what code written for any
    backend catches); it is a headgate ``DefinitionError`` too."""
    from headgate_django.exceptions import DefinitionError
    from headgate_django.tasks import HeadgateTask

    for options in (
        {"max_attempts": 0},
        {"retention": timedelta(seconds=-1)},
        {"retention": timedelta(days=36_501)},  # past the year 9999 from a finished job
    ):
        with pytest.raises(InvalidTaskError) as info:
            HeadgateTask(func=defs.add.func, **options)
        assert isinstance(info.value, DefinitionError)


def test_task_finished_sends_the_return_value_as_get_result_reads_it():
    """Django normalises a return value to JSON (a tuple becomes a list) before it says
    SUCCESSFUL; the signal carried the raw tuple while ``get_result`` read a list."""
    with results_sent(task_finished) as finished:
        result = defs.returns_a_pair.enqueue()
        testing.run_jobs()
    [sent] = finished
    result.refresh()
    assert sent.return_value == result.return_value == [1, "two"]


def a_task_whose_dotted_path_is_longer_than_the_longest_job_kind_headgate_can_store_so_it_can_never_ever_be_run():
    """Module level, as Django requires of a task; its dotted path is over 128 bytes."""


def test_a_queue_name_or_path_headgate_cannot_store_is_a_django_invalid_task_error(settings):
    """Refused where Django validates a task (definition, ``using()``), not at enqueue with
    a bare ``DefinitionError`` that code written for any backend does not catch."""
    from headgate_django.exceptions import DefinitionError
    from headgate_django.tasks import HeadgateTask

    settings.TASKS = {
        **settings.TASKS,
        "open": {"BACKEND": "headgate_django.tasks.HeadgateBackend", "QUEUES": []},
    }
    for queue_name in ("two words", "x" * 129):
        with pytest.raises(InvalidTaskError, match="queue name") as info:
            defs.add.using(backend="open", queue_name=queue_name)
        assert isinstance(info.value, DefinitionError)
    long_path = a_task_whose_dotted_path_is_longer_than_the_longest_job_kind_headgate_can_store_so_it_can_never_ever_be_run
    with pytest.raises(InvalidTaskError, match="job kind") as info:
        HeadgateTask(func=long_path)
    assert isinstance(info.value, DefinitionError)
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_returns_a_ready_result_even_when_a_worker_is_quicker(monkeypatch):
    """``enqueue`` read its job back after the insert had committed: a worker elsewhere
    that ran the task in between (and, with retention 0, deleted the row) made ``enqueue``
    raise ``TaskResultDoesNotExist`` for a task it had enqueued, inviting a second enqueue.
    The worker here is another thread (its own connection), run as the insert returns."""
    import importlib
    import threading

    from django.db import connection

    enqueue_module = importlib.import_module("headgate_django.enqueue")

    if connection.vendor == "sqlite":
        pytest.skip("one writer at a time: a second connection waits on the first")
    real_insert = enqueue_module._job_insert_many()
    ran = []

    def insert_then_a_worker(envelopes, **kwargs):
        ids = real_insert(envelopes, **kwargs)

        def work():
            try:
                ran.append(testing.run_jobs())
            finally:
                connection.close()

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return ids

    monkeypatch.setattr(enqueue_module, "_job_insert_many", lambda: insert_then_a_worker)
    result = defs.forgotten_at_once.enqueue()
    assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    assert len(ran) == 1  # the worker had its chance (and found nothing it could claim yet)
    monkeypatch.undo()
    testing.run_jobs()
    assert not Job.objects.filter(pk=result.id).exists()  # ran, and forgotten


def test_a_task_enqueued_through_another_alias_runs_as_that_alias():
    """The worker rebuilt the running task's result through the task's own backend when
    both aliases store in one database: the TaskContext and the ``task_started`` /
    ``task_finished`` results said ``default`` for a task enqueued through ``once``."""
    with results_sent(task_started, task_finished) as results:
        result = defs.describe.using(backend="once").enqueue()
        testing.run_jobs()
    result.refresh()
    assert result.return_value["backend"] == "once"
    sent = [(r.backend, r.task.backend) for r in results]
    assert sent == [("once", "once"), ("once", "once")]
    # Through the task's own alias, nothing extra is kept beside the job.
    plain = defs.describe.enqueue()
    assert Job.objects.get(pk=plain.id).task_options is None


@pytest.mark.django_db(transaction=True)
def test_a_run_the_worker_repeats_on_a_new_connection_is_not_finished():
    """A sync task whose session dies under it is run again on a new connection, uncharged;
    on its last attempt (here its only one) ``task_finished`` said FAILED for it first, and
    then SUCCESSFUL once the repeat succeeded: sent once, it says what the store holds."""
    from django.db import connection

    from headgate_django.worker.runner import Worker

    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server session to lose")
    result = defs.loses_its_connection.using(backend="once").enqueue()
    defs.LOSE_CONNECTION.append(True)
    try:
        with signals_seen() as seen:
            Worker(concurrency=1, burst=True, run_duties=False).run()
    finally:
        defs.LOSE_CONNECTION.clear()
    result.refresh()
    assert result.is_finished
    # Once, with what the store holds: SUCCESSFUL once the repeat succeeded.
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert [entry for entry in seen if entry[0] == "finished"] == [("finished", result.status)]
    assert seen[-1] == ("finished", result.status)


def test_task_envelope_of_a_task_of_another_kind_of_backend_is_refused(settings):
    """``task_envelope`` read ``max_attempts`` off any backend: a task of Django's dummy
    backend (a common test setting) failed with an ``AttributeError``; and a job made of
    it would wait for a handler no worker registers."""
    from headgate_django.exceptions import DefinitionError
    from headgate_django.tasks import task_envelope

    settings.TASKS = {**settings.TASKS, "dummy": {"BACKEND": _dummy_backend_path()}}
    task = defs.add.using(backend="dummy")
    with pytest.raises(InvalidTaskError, match="not a Headgate backend") as info:
        task_envelope(task, 1, 2)
    assert isinstance(info.value, DefinitionError)


def _dummy_backend_path() -> str:
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        return "django_tasks.backends.dummy.DummyBackend"
    return "django.tasks.backends.dummy.DummyBackend"


def test_a_task_that_gives_up_with_skip_has_finished():
    """headgate's ``Skip`` archives the job at once, whatever attempts are left; the task
    had FAILED for good, but ``task_finished`` was only sent on the last attempt."""
    with signals_seen() as seen:
        result = defs.gives_up.enqueue()  # 25 attempts (HEADGATE["MAX_ATTEMPTS"])
        testing.run_jobs(include_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    assert seen == [
        ("enqueued", TaskResultStatus.READY),
        ("started", TaskResultStatus.RUNNING),
        ("finished", TaskResultStatus.FAILED),
    ]

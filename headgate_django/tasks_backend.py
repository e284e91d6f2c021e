"""The implementation behind :mod:`headgate_django.tasks` (see there).

``HeadgateBackend``: Django's Tasks framework (``django.tasks`` on Django 6, the
``django-tasks`` backport on 5.2) stored and run by headgate-django.

Configure it with::

    TASKS = {"default": {"BACKEND": "headgate_django.tasks.HeadgateBackend",
                         "QUEUES": ["default", "emails"]}}

Every ``@task`` becomes an ordinary headgate job kind (its dotted path), so ``runworkers``
runs it with leases, retries, crash quarantine and the console. ``enqueue`` writes the job
inside the caller's ``transaction.atomic()`` when there is one: the task exists exactly
when your own rows do — something a broker-backed backend cannot promise.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

try:  # Django 6.x
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task_backends  # type: ignore[no-redef,assignment]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,assignment]
    from django_tasks.base import (  # type: ignore[no-redef,assignment]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef,assignment]
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef,assignment]
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (  # type: ignore[no-redef]
        task_enqueued,
        task_finished,
        task_started,
    )

try:  # Django 6.1+: what its own backends make of arguments and return values
    from django.utils.json import normalize_json
except ImportError:  # the django-tasks backport has it too; Django 6.0 has none
    try:
        from django_tasks.utils import normalize_json
    except ImportError:
        normalize_json = None  # type: ignore[assignment]

from headgate_django.context import JobContext
from headgate_django.control import Revoke, Skip, Snooze
from headgate_django.envelope import (
    Envelope,
    check_not_too_long,
    check_result,
    decode_call,
    encode_call,
)
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.names import validate_kind, validate_queue
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.registry import TaskDef, find_task, register
from headgate_django.store.django_tasks import job_insert_and_read, job_insert_with_task_options
from headgate_django.store.reads import job_get
from headgate_django.worker.execute import class_path, runs_again

_STATUS = {
    State.PENDING: TaskResultStatus.READY,
    State.SCHEDULED: TaskResultStatus.READY,
    State.AVAILABLE: TaskResultStatus.READY,
    State.RETRYABLE: TaskResultStatus.READY,
    State.RUNNING: TaskResultStatus.RUNNING,
    State.COMPLETED: TaskResultStatus.SUCCESSFUL,
    State.ARCHIVED: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
    State.QUARANTINED: TaskResultStatus.FAILED,
    State.UNDECODABLE: TaskResultStatus.FAILED,
}


class InvalidTaskOptionError(InvalidTask, DefinitionError):  # type: ignore[misc]
    """A headgate option of a task is out of range: Django's ``InvalidTask`` (what code
    written for any backend catches), and a headgate ``DefinitionError``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeadgateTask(Task):  # type: ignore[misc]
    """A Task with headgate's per-task options, set on the decorator where Django forwards
    extra keyword arguments: ``@task(max_attempts=5, retention=timedelta(days=1))``."""

    max_attempts: int | None = None
    retention: timedelta | None = None


class HeadgateBackend(BaseTaskBackend):
    task_class = HeadgateTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    @property
    def database(self) -> str:
        """The database alias jobs are stored in (``OPTIONS["DATABASE"]``, default ``default``)."""
        return str(self.options.get("DATABASE", "default"))

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        try:  # the job's kind and queue: refused here, not first at enqueue
            validate_kind(task.module_path)
            validate_queue(task.queue_name)
        except DefinitionError as exc:
            raise InvalidTaskOptionError(f"{task.module_path}: {exc}") from None
        max_attempts = getattr(task, "max_attempts", None)
        if max_attempts is not None and max_attempts < 1:
            raise InvalidTaskOptionError(f"{task.module_path}: max_attempts must be at least 1")
        retention = getattr(task, "retention", None)
        if retention is not None and retention < timedelta(0):
            raise InvalidTaskOptionError(f"{task.module_path}: retention cannot be negative")
        try:  # the limit every envelope's retention has
            check_not_too_long(f"{task.module_path}: retention", retention)
        except DefinitionError as exc:
            raise InvalidTaskOptionError(str(exc)) from None
        _register(task)

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        max_attempts = self.options.get("MAX_ATTEMPTS")
        if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be a whole number of at "
                f"least 1, got {max_attempts!r}"
            )

    @property
    def max_attempts(self) -> int | None:
        """Attempts of a task that sets none itself (``OPTIONS["MAX_ATTEMPTS"]``; 1 gives
        Django's run-once semantics); ``None`` defers to ``HEADGATE["MAX_ATTEMPTS"]``."""
        return self.options.get("MAX_ATTEMPTS")

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        from headgate_django.enqueue import enqueue

        envelope = task_envelope(task, *args, **kwargs)
        using = self.database

        # What no column keeps: run_after, and this alias when the task's own is another
        # (the worker runs the task as enqueued, through this backend).
        options: dict[str, Any] = {}
        if task.run_after is not None:
            options["run_after"] = task.run_after.isoformat()
        if self.alias != _declared_backend(task):
            options["backend"] = self.alias

        def insert() -> str:
            if not options:
                return enqueue(envelope, using=using)[0]
            return job_insert_with_task_options(envelope, options, using=using)

        # Read back before the insert commits, so the result is the READY one: a worker
        # elsewhere cannot have run the task yet (nor, with retention 0, deleted its row).
        job = job_insert_and_read(insert, using=using)
        assert job is not None  # inserted in this very transaction
        result = self._result(job)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        job = job_get(result_id, using=self.database)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job)

    def _result(self, job: Job) -> TaskResult:
        args, kwargs = decode_call(bytes(job.payload))
        task = self._task_as_enqueued(job)
        attempts = job.attempt + job.crash_attempt
        # Runs that consumed no attempt: the one under way, a success, a skip (``Skip``).
        skipped = (
            job.state == State.ARCHIVED
            and bool(job.errors)
            and (job.errors[-1].get("kind") == "skip")
        )
        if job.state in (State.RUNNING, State.COMPLETED) or skipped:
            attempts += 1
        errors = [
            TaskError(
                exception_class_path=e.get("exception") or "builtins.Exception",
                traceback=e.get("traceback") or e.get("error", ""),
            )
            for e in job.errors
            if e.get("kind") in ("error", "crash", "skip", "undecodable")
        ]
        result: TaskResult = TaskResult(
            task=task,
            id=job.id,
            status=_STATUS[State(job.state)],
            enqueued_at=job.enqueued_at,
            started_at=job.claimed_at,
            finished_at=job.finalized_at,
            last_attempted_at=job.claimed_at,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=[job.claimed_by] * attempts if job.claimed_by else [],
        )
        if job.state == State.COMPLETED:
            object.__setattr__(result, "_return_value", job.result)
        return result

    def _task_as_enqueued(self, job: Job) -> Task:
        """The job's Task with what ``using()`` changed put back: queue and priority from
        their columns, ``run_after`` from ``task_options``, and this backend, which holds
        the job (a task enqueued through another alias is read back through that one)."""
        task = _task_of(job)
        run_after = (job.task_options or {}).get("run_after")
        changes: dict[str, Any] = {}
        if task.queue_name != job.queue:
            changes["queue_name"] = job.queue
        if task.priority != job.priority:
            changes["priority"] = job.priority
        if run_after is not None:
            changes["run_after"] = datetime.fromisoformat(run_after)
        if task.backend != self.alias:
            changes["backend"] = self.alias
        return task.using(**changes) if changes else task


def _task_of(job: Job) -> Task:
    """The Django Task the job's kind names; :class:`TaskResultDoesNotExist` when it names
    none (a headgate job of another kind, or a task since moved or renamed), which is what
    ``get_result`` promises for an id that is no result of this backend."""
    try:
        task = import_string(job.kind)
    except ImportError:
        task = None
    if not isinstance(task, Task):
        raise TaskResultDoesNotExist(
            f"job {job.id} is of kind {job.kind!r}, which names no Django task"
        )
    return task


def task_envelope(task: Task, *args: Any, **kwargs: Any) -> Envelope:
    """The job a Django task call would be, not yet enqueued: add it to a ``Workflow``
    with ``Workflow(...).add("send", task_envelope(send_email, to), [...])``."""
    backend = task.get_backend()
    if not isinstance(backend, HeadgateBackend):
        # Its job would wait for a handler: only a Headgate backend registers the task.
        raise InvalidTaskOptionError(
            f"{task.module_path}: its backend {task.backend!r} is a "
            f"{type(backend).__name__}, not a Headgate backend: no job can be made of it"
        )
    backend.validate_task(task)
    return Envelope(
        kind=task.module_path,
        payload=encode_call(tuple(as_django_json(args)), as_django_json(kwargs)),
        queue=task.queue_name,
        priority=task.priority,
        scheduled_at=task.run_after,
        max_attempts=getattr(task, "max_attempts", None) or backend.max_attempts,
        retention=getattr(task, "retention", None),
    )


def as_django_json(value: Any) -> Any:
    """``value`` as the framework's own backends pass and keep it: bytes as UTF-8 text,
    tuples and other sequences as lists. A value it cannot normalise is left as it is, for
    headgate's own checks to refuse with their message (``PayloadNotJSONError``)."""
    if normalize_json is None:
        return value
    try:
        return normalize_json(value)
    except (TypeError, ValueError, RecursionError):
        return value


def _register(task: Task) -> None:
    """Make the task a headgate job kind the worker can run (idempotent)."""
    if find_task(task.module_path) is None:
        register(TaskDef(fn=run_django_task, kind=task.module_path, queue=task.queue_name))


def run_django_task(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
    """The handler of every Django task: look the Task up by its path, send Django's task
    signals, and pass a TaskContext when the task takes one."""
    from asgiref.sync import async_to_sync

    job = job_get(ctx.job_id, using=ctx.using)
    if job is None:
        raise TaskResultDoesNotExist(ctx.job_id)
    alias = (job.task_options or {}).get("backend")
    backend = _backend_for(import_string(ctx.kind), ctx.using, alias)
    result = backend._result(job)
    task = result.task
    task_started.send(type(backend), task_result=result)
    began = time.monotonic()
    try:
        call_args = (TaskContext(task_result=result), *args) if task.takes_context else args
        if _is_async(task):
            value = async_to_sync(task.func)(*call_args, **kwargs)
        else:
            value = task.func(*call_args, **kwargs)
        value = as_django_json(value)
        # Before the signal: a value the store would refuse is a failure, and says so.
        check_result(value)
    except BaseException as exc:
        # The last attempt has finished the task, unless the worker runs it again on a new
        # connection (its session died under it): then the repeat says how it finished.
        # headgate's Skip finishes it on any attempt; Snooze and Revoke on none.
        if isinstance(exc, Skip) or (
            not isinstance(exc, Snooze | Revoke)
            and job.attempt + 1 >= job.max_attempts
            and not runs_again(ctx, exc)
        ):
            # As Django's own backends send it: with the error that ended the task.
            error = TaskError(
                exception_class_path=class_path(exc),
                traceback="".join(traceback.format_exception(exc)),
            )
            failed = replace(  # type: ignore[type-var]
                result,
                status=TaskResultStatus.FAILED,
                finished_at=_finished_at(result, began),
                errors=[*result.errors, error],
            )
            task_finished.send(type(backend), task_result=failed)
        raise
    done = replace(  # type: ignore[type-var]
        result, status=TaskResultStatus.SUCCESSFUL, finished_at=_finished_at(result, began)
    )
    # As the store keeps it and get_result reads it back: JSON (a tuple is a list).
    object.__setattr__(done, "_return_value", json.loads(json.dumps(value)))
    task_finished.send(type(backend), task_result=done)
    return value


def _finished_at(result: TaskResult, began: float) -> datetime | None:
    """When the run ended, for the ``task_finished`` signal, without a round trip: the
    claim's instant on the store clock plus the time the task ran. The instant recorded
    with the outcome (what ``get_result`` reads) comes a moment later."""
    if result.started_at is None:
        return None
    return result.started_at + timedelta(seconds=time.monotonic() - began)


def _declared_backend(task: Task) -> str | None:
    """The alias the task was declared with (``@task(backend=...)``); None when its path
    names no Task."""
    try:
        declared = import_string(task.module_path)
    except ImportError:
        return None
    return declared.backend if isinstance(declared, Task) else None


def _backend_for(task: Task, using: str, alias: str | None = None) -> HeadgateBackend:
    """The backend whose database holds the job: the one it was enqueued through with
    ``using(backend=...)`` (``alias``, kept beside the job) while it is a Headgate backend
    of that database; else the task's own, or another Headgate backend of that database."""
    if alias is not None and alias in task_backends.settings:
        chosen = task_backends[alias]
        if isinstance(chosen, HeadgateBackend) and chosen.database == using:
            return chosen
    own = task.get_backend()
    if isinstance(own, HeadgateBackend) and own.database == using:
        return own
    for backend in task_backends.all():
        if isinstance(backend, HeadgateBackend) and backend.database == using:
            return backend
    return cast(HeadgateBackend, own)


def _is_async(task: Task) -> bool:
    import inspect

    return inspect.iscoroutinefunction(task.func)

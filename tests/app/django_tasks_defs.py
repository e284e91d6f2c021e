"""Django Tasks framework tasks (``@task`` from django.tasks / django_tasks) for the
backend conformance tests."""

from __future__ import annotations

from datetime import timedelta

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def echo_arguments(*args, **kwargs) -> list:
    return [list(args), kwargs]


@task()
def returns_bytes() -> bytes:
    return b"caf\xc3\xa9"


@task(queue_name="emails", priority=10)
def send(to: str) -> str:
    return f"sent to {to}"


@task(takes_context=True)
def which_attempt(context, fail_first: bool = False) -> int:
    if fail_first and context.attempt == 1:
        raise ValueError("first attempt fails")
    return context.attempt


@task()
def explode() -> None:
    raise KeyError("no such thing")


@task()
async def async_double(x: int) -> int:
    return x * 2


@task(max_attempts=2, retention=timedelta(hours=1))
def limited() -> None:
    raise RuntimeError("always")


@task()
def returns_a_set() -> set[int]:
    return {1, 2}


@task(takes_context=True)
def describe(context) -> dict:
    """What the running task sees of itself through its context."""
    result = context.task_result
    return {
        "status": str(result.status),
        "queue_name": result.task.queue_name,
        "priority": result.task.priority,
        "backend": result.task.backend,
        "started": result.started_at is not None,
    }


@task()
def returns_a_pair() -> tuple[int, str]:
    return (1, "two")


@task(retention=timedelta(0))
def forgotten_at_once() -> int:
    """Its job is deleted the moment it succeeds (retention 0)."""
    return 1


#: Set by a test: the next run of ``loses_its_connection`` kills its database session.
LOSE_CONNECTION: list[bool] = []


@task()
def loses_its_connection() -> int:
    """Kills its own session and queries on it, once (what a database restart does)."""
    from django.db import connection

    from headgate_django.models import Job

    if LOSE_CONNECTION:
        LOSE_CONNECTION.clear()
        connection.ensure_connection()
        connection.connection.close()
        Job.objects.count()  # fails: the session is gone
    return 1


@task()
def gives_up() -> None:
    """Gives up on purpose with headgate's ``Skip``: archived at once, not retried."""
    from headgate_django import Skip

    raise Skip("nothing to do")

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

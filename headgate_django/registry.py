"""``@task``: turn a function into a job kind, validated when the module is imported.

A bad definition (invalid kind, duplicate kind, impossible limits) fails at import, not in
a worker hours later.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from headgate_django.enqueue import enqueue
from headgate_django.envelope import Envelope, check_fields, encode_call, with_payload
from headgate_django.exceptions import DefinitionError, UnknownTaskError
from headgate_django.kernel.names import internal_kind_error, is_internal_kind

#: ``upcaster(stored_version, args, kwargs) -> (args, kwargs)`` for the current version.
Upcaster = Callable[[int, list[Any], dict[str, Any]], tuple[list[Any], dict[str, Any]]]

_REGISTRY: dict[str, TaskDef] = {}


@dataclass(frozen=True, eq=False)
class TaskDef:
    """A registered job kind. Calling it runs the function directly (handy in tests)."""

    fn: Callable[..., Any]
    kind: str
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    retention: timedelta | None = None
    schema_version: int = 1
    timeout: timedelta | None = None
    upcaster: Upcaster | None = None

    @cached_property
    def is_async(self) -> bool:
        """Asked once per attempt by the worker; ``fn`` never changes, so ask inspect once."""
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @cached_property
    def _template(self) -> Envelope:
        """This kind's envelope without arguments: each call's envelope is a copy of it, and
        inherits the verdict of its field checks (made once, at registration)."""
        template = Envelope(
            kind=self.kind,
            queue=self.queue,
            priority=self.priority,
            schema_version=self.schema_version,
            max_attempts=self.max_attempts,
            retention=self.retention,
            timeout=self.timeout,
        )
        check_fields(template)
        return template

    def envelope(self, *args: Any, **kwargs: Any) -> Envelope:
        """The job this call would be, not yet enqueued (what ``Workflow.add`` takes)."""
        return with_payload(self._template, encode_call(args, kwargs))

    def enqueue(self, *args: Any, **kwargs: Any) -> str:
        """Enqueue one job now (joining the caller's transaction) and return its id."""
        return enqueue(with_payload(self._template, encode_call(args, kwargs)))[0]

    def enqueue_at(self, when: datetime | timedelta, *args: Any, **kwargs: Any) -> str:
        """Enqueue to run at an instant, or after a delay measured on the store clock."""
        env = self.envelope(*args, **kwargs)
        if isinstance(when, timedelta):
            env = replace(env, delay=when)
        else:
            env = replace(env, scheduled_at=when)
        return enqueue(env)[0]


def _validate(definition: TaskDef) -> None:
    # The envelope's own rules (names, limits, priority): the template checks them once.
    _ = definition._template
    if definition.timeout is not None and definition.timeout <= timedelta(0):
        raise DefinitionError(f"{definition.kind}: timeout must be positive")
    params = list(inspect.signature(definition.fn).parameters.values())
    if not params or params[0].kind not in (
        params[0].POSITIONAL_ONLY,
        params[0].POSITIONAL_OR_KEYWORD,
    ):
        raise DefinitionError(
            f"{definition.kind}: a task handler takes the job context as its first argument"
        )


def register(definition: TaskDef) -> TaskDef:
    if is_internal_kind(definition.kind):
        raise internal_kind_error(definition.kind, "a task cannot take it")
    _validate(definition)
    return _add(definition)


def internal_task(*, kind: str, queue: str = "default") -> Callable[[Callable[..., Any]], TaskDef]:
    """Register the handler of one of headgate-django's own kinds (``headgate:…``).

    For the library only. Its definition has no envelope of its own: ``envelope()`` and
    ``enqueue()`` refuse an internal kind, whose jobs only the library's builders make.
    """
    if not is_internal_kind(kind):
        raise DefinitionError(f"{kind!r} is not an internal kind; use @task")

    def decorate(fn: Callable[..., Any]) -> TaskDef:
        return _add(TaskDef(fn=fn, kind=kind, queue=queue))

    return decorate


def _add(definition: TaskDef) -> TaskDef:
    existing = _REGISTRY.get(definition.kind)
    if existing is not None and _origin(existing.fn) != _origin(definition.fn):
        raise DefinitionError(
            f"job kind {definition.kind!r} is already registered by {_origin(existing.fn)}"
        )
    _REGISTRY[definition.kind] = definition
    return definition


def _origin(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def task(
    fn: Callable[..., Any] | None = None,
    *,
    kind: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int | None = None,
    retention: timedelta | None = None,
    schema_version: int = 1,
    timeout: timedelta | None = None,
    upcaster: Upcaster | None = None,
) -> Any:
    """Register a job handler. ``kind`` defaults to the function's dotted path."""

    def decorate(func: Callable[..., Any]) -> TaskDef:
        return register(
            TaskDef(
                fn=func,
                kind=_origin(func) if kind is None else kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                retention=retention,
                schema_version=schema_version,
                timeout=timeout,
                upcaster=upcaster,
            )
        )

    return decorate(fn) if fn is not None else decorate


def get_task(kind: str) -> TaskDef:
    """The definition of a kind a caller may enqueue (the HTTP API's way in)."""
    if is_internal_kind(kind):
        raise internal_kind_error(kind, "it cannot be enqueued by hand")
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownTaskError(f"no task is registered for kind {kind!r}") from None


def find_task(kind: str) -> TaskDef | None:
    return _REGISTRY.get(kind)


def registered_kinds() -> list[str]:
    return sorted(_REGISTRY)


def registered_queues() -> list[str]:
    """The default queues of the registered kinds: names the console knows without
    reading the job table."""
    return sorted({definition.queue for definition in _REGISTRY.values()})

"""``@task``: turn a function into a job kind, validated when the module is imported.

A bad definition (invalid kind, duplicate kind, impossible limits) fails at import, not in
a worker hours later.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from headgate_django.enqueue import enqueue
from headgate_django.envelope import Envelope, check_fields, encode_call, with_payload
from headgate_django.exceptions import DefinitionError, UnknownTaskError
from headgate_django.kernel.names import internal_kind_error, is_internal_kind, validate_kind
from headgate_django.waiting import (
    DEFAULT_TIMEOUT,
    JobResult,
    aenqueue_and_wait,
    enqueue_and_wait,
)

log = logging.getLogger("headgate_django")

#: ``upcaster(stored_version, args, kwargs) -> (args, kwargs)`` for the current version.
Upcaster = Callable[[int, list[Any], dict[str, Any]], tuple[list[Any], dict[str, Any]]]

_REGISTRY: dict[str, TaskDef] = {}
#: Old names of registered kinds: rows stored under one run with the kind's handler.
_ALIASES: dict[str, TaskDef] = {}
#: The batch handlers, by kind and alias: empty in most projects, so a worker asks it first.
_BATCHED: dict[str, TaskDef] = {}
#: The most jobs one batch handler call may take.
MAX_BATCH_SIZE = 1000


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
    #: Former kinds whose stored jobs this handler runs (a rename in two deploys).
    aliases: tuple[str, ...] = ()
    partition_key: str = ""
    rate_class: str | None = None
    weight: int = 1
    unique_key: str | None = None
    unique_window: timedelta | None = None
    unique_replace: frozenset[str] | None = None
    unique_debounce: timedelta | None = None
    deadline: timedelta | None = None
    #: Called with a ``DeathNotice`` once the job is archived for good (``deaths``).
    on_death: Callable[[Any], Any] | None = None
    #: A batch handler (``fn(members)``) takes up to this many jobs of its kind at once.
    batch_size: int | None = None
    #: How long the worker waits for a batch to fill before running what it has.
    batch_window: timedelta = timedelta(0)

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
            partition_key=self.partition_key,
            rate_class=self.rate_class,
            weight=self.weight,
            unique_key=self.unique_key,
            unique_window=self.unique_window,
            unique_replace=self.unique_replace,
            unique_debounce=self.unique_debounce,
            deadline=self.deadline,
        )
        check_fields(template)
        return template

    @cached_property
    def _call_signature(self) -> inspect.Signature | None:
        """The handler's signature without its first parameter (the context), which is
        what a job's arguments must fit; None for a batch handler, whose members carry
        their arguments, or for a callable whose signature cannot be read."""
        if self.batch_size is not None:
            return None
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return None
        return signature.replace(parameters=list(signature.parameters.values())[1:])

    @cached_property
    def _needs_arguments(self) -> bool:
        return self.misfit([], {}) is not None

    def misfit(self, args: Iterable[Any], kwargs: dict[str, Any]) -> str | None:
        """Why the handler cannot be called with ``args`` and ``kwargs``; None if it can."""
        signature = self._call_signature
        if signature is None:
            return None
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            return f"{self.kind}: the arguments do not fit {_plain_call(self.fn)}: {exc}"
        return None

    def _payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        if args or kwargs or self._needs_arguments:  # a call without any: known to fit
            problem = self.misfit(args, kwargs)
            if problem is not None:
                # Said now, where the call is made; not refused, because an envelope may be
                # built before it is complete (a workflow sketched node by node). The job
                # goes to undecodable on its first attempt, for an operator to repair.
                log.warning("%s; a job made so is undecodable when it runs", problem)
        return encode_call(args, kwargs)

    def envelope(self, *args: Any, **kwargs: Any) -> Envelope:
        """The job this call would be, not yet enqueued (what ``Workflow.add`` takes).

        Arguments that do not fit the handler's signature are logged as a warning here;
        the job they make goes to ``undecodable`` when a worker takes it.
        """
        return with_payload(self._template, self._payload(args, kwargs))

    def enqueue(self, *args: Any, **kwargs: Any) -> str:
        """Enqueue one job now (joining the caller's transaction) and return its id."""
        return enqueue(with_payload(self._template, self._payload(args, kwargs)))[0]

    def enqueue_and_wait(
        self, *args: Any, timeout: float | None = DEFAULT_TIMEOUT, **kwargs: Any
    ) -> JobResult:
        """Enqueue one job (in a transaction of its own) and wait up to ``timeout`` seconds
        for it to finish; see :func:`headgate_django.waiting.enqueue_and_wait`."""
        return enqueue_and_wait(self.envelope(*args, **kwargs), timeout=timeout)

    async def aenqueue_and_wait(
        self, *args: Any, timeout: float | None = DEFAULT_TIMEOUT, **kwargs: Any
    ) -> JobResult:
        """:meth:`enqueue_and_wait` for async code (the wait runs on a thread of its own)."""
        return await aenqueue_and_wait(self.envelope(*args, **kwargs), timeout=timeout)

    def enqueue_at(self, when: datetime | timedelta, *args: Any, **kwargs: Any) -> str:
        """Enqueue to run at an instant, or after a delay measured on the store clock."""
        env = self.envelope(*args, **kwargs)
        if isinstance(when, timedelta):
            env = replace(env, delay=when)
        else:
            env = replace(env, scheduled_at=when)
        return enqueue(env)[0]


def _plain_call(fn: Callable[..., Any]) -> str:
    """``name(ctx, a, b=0, *, scale=1)``: a handler's parameters as a caller sees them,
    without annotations (which ``from __future__ import annotations`` turns into text)."""
    signature = inspect.signature(fn)
    plain = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    return f"{getattr(fn, '__name__', 'handler')}{plain}"


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
        first = "the list of members" if definition.batch_size else "the job context"
        raise DefinitionError(
            f"{definition.kind}: a task handler takes {first} as its first argument"
        )
    if definition.batch_size is not None or definition.batch_window:
        _validate_batch(definition)


def _validate_batch(definition: TaskDef) -> None:
    size, window = definition.batch_size, definition.batch_window
    if type(size) is not int or not 1 <= size <= MAX_BATCH_SIZE:
        raise DefinitionError(
            f"{definition.kind}: batch_size must be a whole number from 1 to {MAX_BATCH_SIZE}"
        )
    if not isinstance(window, timedelta) or not timedelta(0) <= window <= timedelta(seconds=10):
        raise DefinitionError(f"{definition.kind}: batch_window must be a timedelta of 0–10 s")
    if definition.is_async:
        raise DefinitionError(f"{definition.kind}: a batch handler must be a plain function")


def register(definition: TaskDef) -> TaskDef:
    if is_internal_kind(definition.kind):
        raise internal_kind_error(definition.kind, "a task cannot take it")
    _validate(definition)
    _validate_aliases(definition)
    return _add(definition)


def _validate_aliases(definition: TaskDef) -> None:
    seen: set[str] = set()
    for alias in definition.aliases:
        if is_internal_kind(alias):
            raise internal_kind_error(alias, "a task cannot take it as an alias")
        validate_kind(alias)
        if alias == definition.kind or alias in seen:
            raise DefinitionError(
                f"{definition.kind}: alias {alias!r} is given twice (or is the kind itself)"
            )
        seen.add(alias)


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
    """Register ``definition`` unless its kind or an alias is another handler's kind or
    alias (the error names both handlers). Re-registering the same function (a module
    imported again) replaces its entry."""
    origin = _origin(definition.fn)
    for name in (definition.kind, *definition.aliases):
        holder = _REGISTRY.get(name) or _ALIASES.get(name)
        if holder is not None and _origin(holder.fn) != origin:
            role = "kind" if name == definition.kind else "alias"
            theirs = "kind" if _REGISTRY.get(name) is holder else f"alias of {holder.kind!r}"
            raise DefinitionError(
                f"job {role} {name!r} of {origin} is already registered as the {theirs} "
                f"by {_origin(holder.fn)}",
                kind=definition.kind,
                name=name,
            )
    previous = _REGISTRY.get(definition.kind)
    if previous is not None:
        for name in (previous.kind, *previous.aliases):
            _ALIASES.pop(name, None)
            _BATCHED.pop(name, None)
    _REGISTRY[definition.kind] = definition
    for alias in definition.aliases:
        _ALIASES[alias] = definition
    if definition.batch_size is not None:
        for name in (definition.kind, *definition.aliases):
            _BATCHED[name] = definition
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
    aliases: Iterable[str] = (),
    partition_key: str = "",
    rate_class: str | None = None,
    weight: int = 1,
    unique_key: str | None = None,
    unique_window: timedelta | None = None,
    unique_replace: Iterable[str] | None = None,
    unique_debounce: timedelta | None = None,
    deadline: timedelta | None = None,
    on_death: Callable[[Any], Any] | None = None,
    batch_size: int | None = None,
    batch_window: timedelta = timedelta(0),
) -> Any:
    """Register a job handler. ``kind`` defaults to the function's dotted path.

    ``aliases`` are former kinds: jobs stored under one are claimed and run by this
    handler, so a kind can be renamed in two deploys (add the alias, then drop it once no
    job of the old kind is left). ``partition_key``, ``rate_class`` and ``weight`` are the
    defaults of its jobs' admission fields; a call overrides them with
    ``dataclasses.replace`` on ``task.envelope(...)``. So are ``unique_key`` and a
    uniqueness mode (``unique_window``, ``unique_replace``, ``unique_debounce``: see
    ``Envelope``; a mode without a key needs one per call), and ``deadline``, a span from
    each job's enqueue. ``on_death(notice)`` is called, as a job of its own, once a job of
    this kind is archived for good (``headgate_django.deaths``).

    With ``batch_size`` the handler is a batch handler: ``fn(members)`` gets a list of up
    to that many jobs of its kind claimed together (waiting up to ``batch_window`` for the
    batch to fill), each a :class:`headgate_django.batches.BatchMember` with its own
    context, fence and outcome (see :mod:`headgate_django.batches`).
    """
    if isinstance(aliases, str):
        raise DefinitionError("aliases must be a list of kinds, not one string")
    alias_tuple = tuple(aliases)
    if isinstance(unique_replace, str):
        raise DefinitionError("unique_replace must be a set of field names, not one string")
    if deadline is not None and not isinstance(deadline, timedelta):
        raise DefinitionError("a task's deadline is a timedelta from each job's enqueue")
    replace_fields = None if unique_replace is None else frozenset(unique_replace)
    if on_death is not None and not callable(on_death):
        raise DefinitionError(f"on_death must be a callable taking a DeathNotice, not {on_death!r}")

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
                aliases=alias_tuple,
                partition_key=partition_key,
                rate_class=rate_class,
                weight=weight,
                unique_key=unique_key,
                unique_window=unique_window,
                unique_replace=replace_fields,
                unique_debounce=unique_debounce,
                deadline=deadline,
                on_death=on_death,
                batch_size=batch_size,
                batch_window=batch_window,
            )
        )

    return decorate(fn) if fn is not None else decorate


def get_task(kind: str) -> TaskDef:
    """The definition of a kind a caller may enqueue (the HTTP API's way in)."""
    if is_internal_kind(kind):
        raise internal_kind_error(kind, "it cannot be enqueued by hand")
    found = find_task(kind)
    if found is None:
        raise UnknownTaskError(f"no task is registered for kind {kind!r}")
    return found


def find_task(kind: str) -> TaskDef | None:
    """The handler of ``kind``: its own, or the one that took it as an alias."""
    return _REGISTRY.get(kind) or _ALIASES.get(kind)


def batch_task(kind: str) -> TaskDef | None:
    """The batch handler of ``kind``, if it has one (one test of an empty dict for most)."""
    return _BATCHED.get(kind) if _BATCHED else None


def registered_kinds() -> list[str]:
    """Every kind a worker here can run, aliases included (what its claims ask for)."""
    return sorted({*_REGISTRY, *_ALIASES})


def registered_queues() -> list[str]:
    """The default queues of the registered kinds: names the console knows without
    reading the job table."""
    return sorted({definition.queue for definition in _REGISTRY.values()})

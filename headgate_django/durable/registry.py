"""``@durable.workflow`` and ``@durable.operation``: register code by (name, version).

Registration is checked when the decorator runs, so a bad or duplicate definition fails at
import, not in a worker hours later. The registry is per process: a worker replays an
execution only with the exact (name, version) recorded on its header, and one that lacks
it leaves the task for a worker that has it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.backoff import MAX_WAIT, policy_delay_ms
from headgate_django.kernel.names import has_control_characters, validate_queue

#: StartToClose: how long one attempt of an Operation may run before it is uncertain.
DEFAULT_OPERATION_TIMEOUT = timedelta(minutes=5)
DEFAULT_OPERATION_ATTEMPTS = 5
#: Wait before retrying a failed Operation attempt: fixed unless a coefficient is given.
DEFAULT_RETRY_DELAY = timedelta(seconds=1)

_MS = timedelta(milliseconds=1)
_MAX_NAME = 128
_MAX_VERSION = 64


@dataclass(frozen=True, eq=False)
class QueryDef:
    """A query handler ``fn(ctx, *args) -> JSON``: reads ``ctx.state``, never writes."""

    fn: Callable[..., Any]
    name: str


@dataclass(frozen=True, eq=False)
class UpdateDef:
    """An update handler ``fn(ctx, payload) -> JSON`` that changes ``ctx.state``, and the
    optional ``validator(ctx, payload)`` that refuses an update by raising."""

    fn: Callable[[Any, Any], Any]
    name: str
    validator: Callable[[Any, Any], Any] | None = None


@dataclass(frozen=True, eq=False)
class WorkflowDef:
    """A registered workflow function ``fn(ctx, input) -> result``, with the query and
    update handlers registered on it (``@definition.query`` / ``@definition.update``)."""

    fn: Callable[[Any, Any], Any]
    name: str
    version: str
    queries: dict[str, QueryDef] = field(default_factory=dict)
    updates: dict[str, UpdateDef] = field(default_factory=dict)

    def __call__(self, ctx: Any, input: Any = None) -> Any:
        return self.fn(ctx, input)

    def query(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register ``fn(ctx, *args)`` as query ``name`` of this workflow version.

        It runs on a read-only replay of the execution's history and reads ``ctx.state``;
        it returns JSON. The decorated function is returned unchanged.
        """
        check_name("query name", name, _MAX_NAME)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            _check_handler("query", fn, "(ctx, *args)", 1)
            _add_handler(self, self.queries, "query", QueryDef(fn, name))
            return fn

        return decorate

    def update(
        self, name: str, *, validator: Callable[[Any, Any], Any] | None = None
    ) -> Callable[[Callable[[Any, Any], Any]], Callable[[Any, Any], Any]]:
        """Register ``fn(ctx, payload)`` as update ``name`` of this workflow version.

        ``validator(ctx, payload)`` runs first, on a read-only replay, and rejects the
        update by raising (nothing is recorded then). The handler runs inside the replay
        where the workflow code waits, changes ``ctx.state`` and returns JSON for the
        caller. The decorated function is returned unchanged.
        """
        check_name("update name", name, _MAX_NAME)
        if validator is not None:
            _check_handler("update validator", validator, "(ctx, payload)", 2)

        def decorate(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
            _check_handler("update", fn, "(ctx, payload)", 2)
            _add_handler(self, self.updates, "update", UpdateDef(fn, name, validator))
            return fn

        return decorate

    def update_handlers(self) -> dict[str, Callable[[Any, Any], Any]]:
        """Update name → handler, as the replay engine takes them."""
        return {name: definition.fn for name, definition in self.updates.items()}


@dataclass(frozen=True, eq=False)
class OperationDef:
    """A registered Operation ``fn(ctx, input) -> result``: the only place for side effects."""

    fn: Callable[[Any, Any], Any]
    name: str
    version: str
    max_attempts: int = DEFAULT_OPERATION_ATTEMPTS
    timeout: timedelta | None = DEFAULT_OPERATION_TIMEOUT
    queue: str | None = None
    retry_delay: timedelta = DEFAULT_RETRY_DELAY
    backoff_coefficient: float = 1.0
    max_retry_delay: timedelta | None = None

    def __call__(self, ctx: Any, input: Any = None) -> Any:
        return self.fn(ctx, input)

    def delay_after(self, failures: int) -> timedelta:
        """How long to wait before the attempt that follows ``failures`` failed ones."""
        cap = self.max_retry_delay
        ms = policy_delay_ms(
            failures,
            delay_ms=self.retry_delay // _MS,
            coefficient=self.backoff_coefficient,
            cap_ms=None if cap is None else cap // _MS,
        )
        return max(ms, 1) * _MS


_WORKFLOWS: dict[tuple[str, str], WorkflowDef] = {}
_OPERATIONS: dict[tuple[str, str], OperationDef] = {}


def check_name(what: str, value: object, limit: int) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise DefinitionError(
            f"a {what} must be a non-empty string without outer spaces, not {value!r}"
        )
    if len(value) > limit or has_control_characters(value):
        raise DefinitionError(f"a {what} has at most {limit} printable characters: {value[:40]!r}")
    return value


def check_execution_id(what: str, value: object, limit: int) -> str:
    """An execution id chosen by the caller (``workflow_id=``, a child's ``key``): a name,
    and no ``/``, which no ``/durable/executions/{id}`` route or console page could address
    (the HTTP API refuses it as well)."""
    check_name(what, value, limit)
    if "/" in str(value):
        raise DefinitionError(f"a {what} may not contain '/': {str(value)[:40]!r}")
    return str(value)


def _check_function(what: str, fn: Callable[..., Any]) -> None:
    if not callable(fn):
        raise DefinitionError(f"@durable.{what} decorates a function, not {fn!r}")
    if inspect.iscoroutinefunction(fn):
        raise DefinitionError(f"{_origin(fn)}: a durable {what} must not be async")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise DefinitionError(
            f"{_origin(fn)}: a durable {what} takes exactly (ctx, input)"
        ) from None


def _check_handler(what: str, fn: Any, shape: str, arity: int) -> None:
    """``fn`` must take ``arity`` positional arguments (a query: ctx, then any it names)."""
    if not callable(fn) or inspect.iscoroutinefunction(fn):
        raise DefinitionError(f"a durable {what} is a plain (not async) function {shape}")
    try:
        signature = inspect.signature(fn)
        args = [None] * arity
        signature.bind_partial(*args) if arity == 1 else signature.bind(*args)
    except TypeError:
        raise DefinitionError(f"{_origin(fn)}: a durable {what} takes {shape}") from None


def _add_handler(workflow: WorkflowDef, table: dict[str, Any], what: str, handler: Any) -> None:
    existing = table.get(handler.name)
    # As for workflows: re-importing the same module is not a conflict.
    if existing is not None and _origin(existing.fn) != _origin(handler.fn):
        raise DefinitionError(
            f"workflow {workflow.name!r} version {workflow.version!r} already has {what} "
            f"{handler.name!r} ({_origin(existing.fn)})"
        )
    table[handler.name] = handler


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _register(table: dict[tuple[str, str], Any], what: str, definition: Any) -> Any:
    key = (definition.name, definition.version)
    existing = table.get(key)
    # Re-importing the same module (autoreload, a second import path) is not a conflict.
    if existing is not None and _origin(existing.fn) != _origin(definition.fn):
        raise DefinitionError(
            f"durable {what} {definition.name!r} version {definition.version!r} is already "
            f"registered by {_origin(existing.fn)}; register changed code under a new version"
        )
    table[key] = definition
    return definition


def workflow(name: str, *, version: str = "1") -> Callable[[Callable[..., Any]], WorkflowDef]:
    """Register ``fn(ctx, input)`` as workflow ``name`` at ``version``."""
    check_name("workflow name", name, _MAX_NAME)
    check_name("workflow version", version, _MAX_VERSION)

    def decorate(fn: Callable[..., Any]) -> WorkflowDef:
        _check_function("workflow", fn)
        return _register(_WORKFLOWS, "workflow", WorkflowDef(fn, name, version))  # type: ignore[no-any-return]

    return decorate


def operation(
    name: str,
    *,
    version: str = "1",
    max_attempts: int = DEFAULT_OPERATION_ATTEMPTS,
    timeout: timedelta | None = DEFAULT_OPERATION_TIMEOUT,
    queue: str | None = None,
    retry_delay: timedelta = DEFAULT_RETRY_DELAY,
    backoff_coefficient: float = 1.0,
    max_retry_delay: timedelta | None = None,
) -> Callable[[Callable[..., Any]], OperationDef]:
    """Register ``fn(ctx, input)`` as Operation ``name`` at ``version``.

    ``max_attempts`` counts failed attempts; a failed attempt with attempts left is retried
    after ``retry_delay`` (store clock; 1 s and fixed by default), multiplied by
    ``backoff_coefficient`` for each further failure and capped at ``max_retry_delay``.
    ``timeout`` is StartToClose per attempt (None: no limit) — an attempt that outlives it
    is *uncertain*, because it may have had its effect. ``queue`` defaults to the
    execution's task queue.
    """
    check_name("operation name", name, _MAX_NAME)
    check_name("operation version", version, _MAX_VERSION)
    if not isinstance(max_attempts, int) or max_attempts < 1:
        raise DefinitionError(f"operation {name!r}: max_attempts must be an integer ≥ 1")
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        raise DefinitionError(f"operation {name!r}: timeout must be a positive timedelta or None")
    if queue is not None:
        validate_queue(queue)
    _check_retry_policy(name, max_attempts, retry_delay, backoff_coefficient, max_retry_delay)

    def decorate(fn: Callable[..., Any]) -> OperationDef:
        _check_function("operation", fn)
        definition = OperationDef(
            fn,
            name,
            version,
            max_attempts,
            timeout,
            queue,
            retry_delay,
            backoff_coefficient,
            max_retry_delay,
        )
        return _register(_OPERATIONS, "operation", definition)  # type: ignore[no-any-return]

    return decorate


def _check_retry_policy(
    name: str, max_attempts: int, delay: Any, coefficient: Any, cap: Any
) -> None:
    if not isinstance(delay, timedelta) or delay < _MS:
        raise DefinitionError(
            f"operation {name!r}: retry_delay must be a timedelta of at least 1 ms"
        )
    if (
        isinstance(coefficient, bool)
        or not isinstance(coefficient, int | float)
        or not (1 <= coefficient <= 100)
    ):
        raise DefinitionError(
            f"operation {name!r}: backoff_coefficient must be a number from 1 to 100"
        )
    if cap is not None and (not isinstance(cap, timedelta) or cap < delay):
        raise DefinitionError(
            f"operation {name!r}: max_retry_delay must be a timedelta no shorter than retry_delay, or None"
        )
    # The delay grows with each failure: the one before the last attempt is the longest.
    longest = policy_delay_ms(
        max_attempts - 1,
        delay_ms=delay // _MS,
        coefficient=coefficient,
        cap_ms=None if cap is None else cap // _MS,
    )
    if max_attempts > 1 and longest > MAX_WAIT // _MS:
        raise DefinitionError(
            f"operation {name!r}: the delay before attempt {max_attempts} would be over "
            f"{MAX_WAIT.days} days: set max_retry_delay, or a smaller "
            "backoff_coefficient or max_attempts"
        )


def find_workflow(name: str, version: str) -> WorkflowDef | None:
    return _WORKFLOWS.get((name, version))


def require_workflow(name: str, version: str) -> WorkflowDef:
    """The workflow registered as (``name``, ``version``), or a ``DefinitionError`` naming
    the versions of ``name`` this process has: what a start refuses before it writes."""
    check_name("workflow name", name, _MAX_NAME)
    check_name("workflow version", version, _MAX_VERSION)
    definition = find_workflow(name, version)
    if definition is None:
        known = sorted(d.version for d in registered_workflows() if d.name == name)
        raise DefinitionError(
            f"no durable workflow {name!r} version {version!r} is registered here"
            + (f" (versions: {', '.join(known)})" if known else ""),
            workflow=name,
            version=version,
        )
    return definition


def find_operation(name: str, version: str) -> OperationDef | None:
    return _OPERATIONS.get((name, version))


def registered_workflows() -> list[WorkflowDef]:
    return list(_WORKFLOWS.values())

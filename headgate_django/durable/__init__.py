"""Workflow-as-code: plain functions replayed deterministically over an append-only history.

::

    from headgate_django import durable

    @durable.operation("charge", version="1")
    def charge(ctx, order):            # side effects live here; ctx.execution_key dedupes them
        ...

    @durable.workflow("checkout", version="1")
    def checkout(ctx: durable.Context, order):
        receipt = ctx.execute_operation("charge", "1", order).result()
        ...

    durable.Client().start("checkout", "1", order, business_idempotency_key="order:42")

The decorators and the replay checker are importable before Django's app registry is
ready (a ``tasks.py`` module registers at import time); ``Client``, ``Manager`` and the
views load the store on first use. See ``docs/durable.md``.

The decorators, the checker and the replay kernel's names load on first use as well:
every worker imports this package at start-up for the durable handlers
(:mod:`.handlers`), and a project that defines no durable workflow need not pay for the
replay kernel and its event types.
"""

from typing import TYPE_CHECKING, Any

from headgate_django.control import Abort, Uncertain
from headgate_django.exceptions import ChildFailedError, NondeterminismError, OperationFailedError

if TYPE_CHECKING:
    from headgate_django.durable.checker import replay
    from headgate_django.durable.registry import (
        OperationDef,
        QueryDef,
        UpdateDef,
        WorkflowDef,
        operation,
        workflow,
    )
    from headgate_django.kernel.replay import ChildFuture, Context, Future
    from headgate_django.kernel.replay_events import CANCEL_REQUESTED

_LAZY = {
    "replay": "headgate_django.durable.checker",
    "OperationDef": "headgate_django.durable.registry",
    "QueryDef": "headgate_django.durable.registry",
    "UpdateDef": "headgate_django.durable.registry",
    "WorkflowDef": "headgate_django.durable.registry",
    "operation": "headgate_django.durable.registry",
    "workflow": "headgate_django.durable.registry",
    "ChildFuture": "headgate_django.kernel.replay",
    "Context": "headgate_django.kernel.replay",
    "Future": "headgate_django.kernel.replay",
    "CANCEL_REQUESTED": "headgate_django.kernel.replay_events",
    "Client": "headgate_django.durable.client",
    "StartResult": "headgate_django.durable.client",
    "SignalWithStartResult": "headgate_django.durable.client",
    "ChildView": "headgate_django.durable.manager",
    "Manager": "headgate_django.durable.manager",
    "ExecutionView": "headgate_django.durable.manager",
    "Page": "headgate_django.durable.manager",
    "RunView": "headgate_django.durable.manager",
    "OperationContext": "headgate_django.durable.operations",
    "UpdateView": "headgate_django.durable.updates",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # see the module's docstring
        from importlib import import_module

        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'headgate_django.durable' has no attribute {name!r}")


__all__ = [
    "CANCEL_REQUESTED",
    "Abort",
    "ChildFailedError",
    "ChildFuture",
    "ChildView",
    "Client",
    "Context",
    "ExecutionView",
    "Future",
    "Manager",
    "NondeterminismError",
    "OperationContext",
    "OperationDef",
    "OperationFailedError",
    "Page",
    "QueryDef",
    "RunView",
    "SignalWithStartResult",
    "StartResult",
    "Uncertain",
    "UpdateDef",
    "UpdateView",
    "WorkflowDef",
    "operation",
    "replay",
    "workflow",
]

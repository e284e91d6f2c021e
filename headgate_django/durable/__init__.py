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
"""

from typing import Any

from headgate_django.control import Abort, Uncertain
from headgate_django.durable.checker import replay
from headgate_django.durable.registry import (
    OperationDef,
    QueryDef,
    UpdateDef,
    WorkflowDef,
    operation,
    workflow,
)
from headgate_django.exceptions import ChildFailedError, NondeterminismError, OperationFailedError
from headgate_django.kernel.replay import ChildFuture, Context, Future
from headgate_django.kernel.replay_events import CANCEL_REQUESTED

_LAZY = {
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
    # These import the store, which needs the app registry: load them on first use.
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
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

"""DAG workflows over ordinary jobs, driven by a coordinator job.

See ``docs/`` for the guide; the names here follow Headgate's workflow API.

Each name loads its module on first use. Every worker imports this package at start-up,
to register the coordinator's and the node jobs' handlers (:mod:`.handlers`,
:mod:`.internal`), and none of the building, inspection, cancel, retry and signal API
below: loading it with them cost each worker process about 9 ms before its first claim.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headgate_django.workflows.builder import PreparedWorkflow, Workflow
    from headgate_django.workflows.bundle import PreparedBundle, prepare_bundle
    from headgate_django.workflows.cancel import cancel_workflow
    from headgate_django.workflows.grafts import PreparedGraft, WorkflowGraft, submit_graft
    from headgate_django.workflows.inspect import (
        WorkflowNode,
        WorkflowPage,
        WorkflowSnapshot,
        WorkflowSummary,
        inspect_workflow,
        list_workflows,
        workflow_dependencies,
        workflow_dependents,
        workflow_events,
        workflow_node,
    )
    from headgate_django.workflows.retry import (
        Recovery,
        RetryReceipt,
        request_failed_subgraph_retry,
    )
    from headgate_django.workflows.signals import (
        SignalEmission,
        SignalReceipt,
        SignalRecord,
        emit_signal,
        emit_signal_with,
        list_signals,
    )

#: Each public name → the module of this package that defines it.
_LAZY = {
    "PreparedWorkflow": "builder",
    "Workflow": "builder",
    "PreparedBundle": "bundle",
    "prepare_bundle": "bundle",
    "cancel_workflow": "cancel",
    "PreparedGraft": "grafts",
    "WorkflowGraft": "grafts",
    "submit_graft": "grafts",
    "WorkflowNode": "inspect",
    "WorkflowPage": "inspect",
    "WorkflowSnapshot": "inspect",
    "WorkflowSummary": "inspect",
    "inspect_workflow": "inspect",
    "list_workflows": "inspect",
    "workflow_dependencies": "inspect",
    "workflow_dependents": "inspect",
    "workflow_events": "inspect",
    "workflow_node": "inspect",
    "Recovery": "retry",
    "RetryReceipt": "retry",
    "request_failed_subgraph_retry": "retry",
    "SignalEmission": "signals",
    "SignalReceipt": "signals",
    "SignalRecord": "signals",
    "emit_signal": "signals",
    "emit_signal_with": "signals",
    "list_signals": "signals",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


__all__ = [
    "PreparedBundle",
    "PreparedGraft",
    "PreparedWorkflow",
    "Recovery",
    "RetryReceipt",
    "SignalEmission",
    "SignalReceipt",
    "SignalRecord",
    "Workflow",
    "WorkflowGraft",
    "WorkflowNode",
    "WorkflowPage",
    "WorkflowSnapshot",
    "WorkflowSummary",
    "cancel_workflow",
    "emit_signal",
    "emit_signal_with",
    "inspect_workflow",
    "list_signals",
    "list_workflows",
    "prepare_bundle",
    "request_failed_subgraph_retry",
    "submit_graft",
    "workflow_dependencies",
    "workflow_dependents",
    "workflow_events",
    "workflow_node",
]

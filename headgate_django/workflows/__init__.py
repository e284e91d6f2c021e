"""DAG workflows over ordinary jobs, driven by a coordinator job.

See ``docs/`` for the guide; the names here follow Headgate's workflow API.
"""

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
from headgate_django.workflows.retry import Recovery, RetryReceipt, request_failed_subgraph_retry
from headgate_django.workflows.signals import (
    SignalEmission,
    SignalReceipt,
    SignalRecord,
    emit_signal,
    emit_signal_with,
    list_signals,
)

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

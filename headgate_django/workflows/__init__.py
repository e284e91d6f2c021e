"""DAG workflows over ordinary jobs, driven by a coordinator job.

See ``docs/`` for the guide; the names here follow Headgate's workflow API.
"""

from headgate_django.workflows.builder import PreparedWorkflow, Workflow
from headgate_django.workflows.cancel import cancel_workflow
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

__all__ = [
    "PreparedWorkflow",
    "Workflow",
    "WorkflowNode",
    "WorkflowPage",
    "WorkflowSnapshot",
    "WorkflowSummary",
    "cancel_workflow",
    "inspect_workflow",
    "list_workflows",
    "workflow_dependencies",
    "workflow_dependents",
    "workflow_events",
    "workflow_node",
]

"""The public surface is pinned: removing or renaming a public name must be deliberate."""

import headgate_django
import headgate_django.workflows


def test_headgate_django_all():
    assert sorted(headgate_django.__all__) == sorted(
        [
            "BackpressureError",
            "ConfigurationError",
            "DefinitionError",
            "DuplicateError",
            "Envelope",
            "HeadgateError",
            "IdConflictError",
            "InternalKindError",
            "JobContext",
            "LeaseLostError",
            "NondeterminismError",
            "NotFoundError",
            "QuarantinedError",
            "RevisionConflictError",
            "Revoke",
            "Skip",
            "Snooze",
            "TaskDef",
            "__version__",
            "enqueue",
            "task",
        ]
    )
    for name in headgate_django.__all__:
        assert getattr(headgate_django, name) is not None


def test_workflows_all_names_from_the_design():
    required = {
        "Workflow",
        "WorkflowGraft",
        "SignalEmission",
        "prepare_bundle",
        "inspect_workflow",
        "workflow_node",
        "workflow_dependencies",
        "workflow_dependents",
        "workflow_events",
        "list_workflows",
        "emit_signal",
        "emit_signal_with",
        "list_signals",
        "request_failed_subgraph_retry",
        "cancel_workflow",
    }
    assert required <= set(headgate_django.workflows.__all__)
    for name in headgate_django.workflows.__all__:
        assert getattr(headgate_django.workflows, name) is not None


def test_signals_all():
    import headgate_django.signals

    assert sorted(headgate_django.signals.__all__) == [
        "job_archived",
        "job_failed",
        "job_finished",
        "job_retried",
        "workflow_finished",
    ]

"""The public surface is pinned: removing or renaming a public name must be deliberate."""

import os

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
            "ReservedIdError",
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


def test_public_submodules_are_attributes_of_the_package_without_their_own_import():
    """``import headgate_django`` then ``headgate_django.schedules.upsert(...)``, as the
    design's examples read, in a fresh interpreter where nothing imported them yet."""
    import subprocess
    import sys

    code = (
        "import django, headgate_django as h; django.setup(); "
        "print(h.admission.explain, h.schedules.upsert, h.durable.Client, "
        "h.workflows.Workflow, h.signals.job_finished, h.testing)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    try:
        headgate_django.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")

"""headgate-django: durable jobs, workflows and workflow-as-code in your Django database.

The names here are importable before Django's app registry is ready (so ``tasks.py``
modules can use ``@task`` at import time); anything that touches the database is imported
lazily inside the function that needs it.
"""

import importlib

from headgate_django.control import Revoke, Skip, Snooze
from headgate_django.enqueue import enqueue
from headgate_django.envelope import Envelope
from headgate_django.exceptions import (
    BackpressureError,
    ConfigurationError,
    DefinitionError,
    DuplicateError,
    HeadgateError,
    IdConflictError,
    InternalKindError,
    LeaseLostError,
    NondeterminismError,
    NotFoundError,
    QuarantinedError,
    ReservedIdError,
    RevisionConflictError,
)
from headgate_django.registry import TaskDef, task

__version__ = "0.1.0"


#: Subpackages the design's examples reach as attributes (``headgate_django.schedules``)
#: after a plain ``import headgate_django``: imported on first use, as they need the app
#: registry.
_SUBMODULES = frozenset({"admission", "durable", "schedules", "signals", "testing", "workflows"})


def __getattr__(name: str) -> object:
    # JobContext imports the store, which needs the app registry: load it on first use.
    if name == "JobContext":
        from headgate_django.context import JobContext

        return JobContext
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'headgate_django' has no attribute {name!r}")


__all__ = [
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
    "ReservedIdError",
    "RevisionConflictError",
    "Revoke",
    "Skip",
    "Snooze",
    "TaskDef",
    "__version__",
    "enqueue",
    "task",
]

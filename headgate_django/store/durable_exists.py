"""Whether the store holds any durable execution, asked without loading the durable store.

The durable duties ask it first. A project that has never started an execution has
nothing to vacuum or reconcile, and the store and runtime a pass would use cost each
worker that holds those duties about 19 ms to load.
"""

from __future__ import annotations

from headgate_django.models import Execution


def execution_exists(*, using: str = "default") -> bool:
    """Whether any durable execution exists, in any state."""
    return Execution.objects.using(using).exists()

"""Loaded by ``HeadgateConfig.ready()``: registers the coordinator's kind and the store
hook that wakes coordinators (and the links waiting for a child workflow) in the commit
that finishes a workflow's job. The node jobs' handlers are :mod:`.internal`'s.

Every worker loads this at start-up, so it loads neither the coordinator nor the
workflow store (with the graph and plan kernel, 4 ms of a worker's start): they load
with the first coordinator this worker runs and the first job of a workflow it sees
finish.
"""

from __future__ import annotations

from typing import Any

from headgate_django.context import JobContext
from headgate_django.kernel.names import COORDINATOR_KIND
from headgate_django.registry import internal_task
from headgate_django.store import hooks


@internal_task(kind=COORDINATOR_KIND, queue="headgate-workflow")
def coordinate(
    ctx: JobContext, graph: Any = None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One attempt of a workflow's coordinator: :func:`.coordinator.coordinate`."""
    from headgate_django.workflows import coordinator

    return coordinator.coordinate(ctx, graph, options)


def _wake_on_finish(cursor: Any, conn: Any, workflow_ids: set[str], job_ids: set[str]) -> None:
    """``ON_FINISH``: :func:`~headgate_django.store.workflows.wake_on_finish`."""
    from headgate_django.store.workflows import wake_on_finish

    wake_on_finish(cursor, conn, workflow_ids, job_ids)


hooks.ON_FINISH.append(_wake_on_finish)

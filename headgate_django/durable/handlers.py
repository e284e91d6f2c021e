"""Loaded by ``HeadgateConfig.ready()``: registers the durable job kinds (the workflow task
and the Operation job), the store hook that records Operation outcomes, and the duties."""

from __future__ import annotations

from headgate_django.durable import duties, operations, workflow_task  # noqa: F401  (kinds)
from headgate_django.store import durable_jobs
from headgate_django.worker.duties import EXTRA_DUTIES

if duties.vacuum_duty not in EXTRA_DUTIES:
    EXTRA_DUTIES.extend([duties.vacuum_duty, duties.reconcile_duty])

#: Which durable kinds a worker does not claim, per ``runworkers --durable-mode``.
MODES: dict[str, tuple[str, ...]] = {
    "combined": (),
    "workflow-only": (durable_jobs.OP_KIND,),
    "operation-only": (durable_jobs.TASK_KIND,),
}

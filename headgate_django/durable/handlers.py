"""Loaded by ``HeadgateConfig.ready()``: registers the durable job kinds (the workflow task
and the Operation job), the store hook that records Operation outcomes, the duties, and
the status-line field naming the durable code this worker lacks."""

from __future__ import annotations

from headgate_django.durable import duties, operations, workflow_task  # noqa: F401  (kinds)
from headgate_django.durable.missing_code import missing_code
from headgate_django.store import durable_jobs
from headgate_django.worker.duties import EXTRA_DUTIES
from headgate_django.worker.status import STATUS_FIELDS

if duties.vacuum_duty not in EXTRA_DUTIES:
    EXTRA_DUTIES.extend([duties.vacuum_duty, duties.reconcile_duty])
if missing_code.status not in STATUS_FIELDS:
    STATUS_FIELDS.append(missing_code.status)

#: Which durable kinds a worker does not claim, per ``runworkers --durable-mode``.
MODES: dict[str, tuple[str, ...]] = {
    "combined": (),
    "workflow-only": (durable_jobs.OP_KIND,),
    "operation-only": (durable_jobs.TASK_KIND,),
}

"""Channel-layer group names of live pages.

Group names allow only ASCII letters, digits, ``-``, ``_`` and ``.`` and fewer than 100
characters, while workflow and execution ids are arbitrary strings, so ids are hashed.
"""

from __future__ import annotations

import hashlib

#: ``Job.workflow_id`` prefix the durable runtime gives an execution's jobs.
DURABLE_PREFIX = "durable:"
#: The schedule list's pages (one group: a pass moves many schedules at once).
SCHEDULES_GROUP = "headgate.schedules"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:40]


def workflow_group(workflow_id: str) -> str:
    return f"headgate.wf.{_digest(workflow_id)}"


def execution_group(execution_id: str) -> str:
    return f"headgate.ex.{_digest(execution_id)}"


def group_of_job_group(job_group: str) -> str:
    """The live group for a ``Job.workflow_id`` value (a workflow, or ``durable:<id>``)."""
    if job_group.startswith(DURABLE_PREFIX):
        return execution_group(job_group[len(DURABLE_PREFIX) :])
    return workflow_group(job_group)

"""Loaded by ``HeadgateConfig.ready()``: registers the durable job kinds (the workflow task
and the Operation job), the store hook that records Operation outcomes, the duties, and
the status-line field naming the durable code this worker lacks.

Every worker loads this at start-up, so it loads none of the durable runtime itself: the
replay kernel, the durable store and the handlers' modules (19 ms of a worker's start on
a two-core machine, most of it creating their dataclasses) load with the first durable
job this worker runs, the first Operation job it sees finish, or the first run of a
durable duty that finds an execution in the store (:mod:`.duties`).
"""

from __future__ import annotations

from typing import Any

from headgate_django.context import JobContext
from headgate_django.durable import duties
from headgate_django.durable.missing_code import missing_code
from headgate_django.kernel.names import DURABLE_GROUP_PREFIX, DURABLE_OP_KIND, DURABLE_TASK_KIND
from headgate_django.registry import internal_task
from headgate_django.store import hooks
from headgate_django.worker.duties import EXTRA_DUTIES
from headgate_django.worker.status import STATUS_FIELDS


@internal_task(kind=DURABLE_TASK_KIND)
def workflow_task(ctx: JobContext, execution_id: str) -> dict[str, Any]:
    """One replay pass of an execution: :func:`.workflow_task.workflow_task`."""
    from headgate_django.durable.workflow_task import workflow_task as replay_pass

    return replay_pass(ctx, execution_id)


@internal_task(kind=DURABLE_OP_KIND)
def operation_job(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
    """One attempt of an Operation: :func:`.operations.operation_job`."""
    from headgate_django.durable.operations import operation_job as attempt

    return attempt(ctx, *args, **kwargs)


def _record_operation_outcomes(
    cursor: Any, conn: Any, workflow_ids: set[str], job_ids: set[str]
) -> None:
    """``ON_FINISH``: the Operation jobs among those that finished become facts of their
    executions' histories in the same commit, whoever finished them (their handler, a
    cancel, a quarantine)."""
    groups = sorted(w for w in workflow_ids if w.startswith(DURABLE_GROUP_PREFIX))
    if groups:
        from headgate_django.store.durable_jobs import settle_finished_operations

        for group in groups:
            settle_finished_operations(cursor, conn, group.removeprefix(DURABLE_GROUP_PREFIX))


#: Why a workflow task will not run again (``hooks.Death.reason``), for its execution.
_TASK_DEATHS = {
    "undecodable": "its workflow task is undecodable",
    "skipped": "its workflow task was skipped",
    "attempts_exhausted": "its workflow task ran out of attempts",
    "deadline_exceeded": "its workflow task passed its deadline",
}


def _fail_executions_of_dead_tasks(cursor: Any, conn: Any, deaths: list[hooks.Death]) -> None:
    """``ON_ARCHIVE``: a workflow task archived for good or marked undecodable fails its
    execution with the reason, in the same commit (``store.durable.execution_fail_dead_task``);
    left ``running``, it would wait for a pass that never comes."""
    dead = [d for d in deaths if d.kind == DURABLE_TASK_KIND]
    if dead:
        from headgate_django.store.durable import execution_fail_dead_task
        from headgate_django.store.durable_jobs import execution_of_task

        for death in dead:
            why = _TASK_DEATHS.get(death.reason, f"its workflow task ended ({death.reason})")
            reason = f"{why}: {death.error}" if death.error else why
            execution_fail_dead_task(cursor, conn, execution_of_task(death.job_id), reason)


hooks.ON_FINISH.append(_record_operation_outcomes)
hooks.ON_ARCHIVE.append(_fail_executions_of_dead_tasks)
if duties.vacuum_duty not in EXTRA_DUTIES:
    EXTRA_DUTIES.extend([duties.vacuum_duty, duties.reconcile_duty])
if missing_code.status not in STATUS_FIELDS:
    STATUS_FIELDS.append(missing_code.status)

#: Which durable kinds a worker does not claim, per ``runworkers --durable-mode``.
MODES: dict[str, tuple[str, ...]] = {
    "combined": (),
    "workflow-only": (DURABLE_OP_KIND,),
    "operation-only": (DURABLE_TASK_KIND,),
}

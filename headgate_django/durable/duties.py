"""The durable runtime's maintenance duties, run as singleton duties by the workers.

- ``durable-vacuum`` deletes terminal executions (with history, signals and jobs), and the
  runs an execution that continued as new ended, after ``HEADGATE['DURABLE_RETENTION']``
  (default 30 days; None or 0 keeps them forever).
- ``durable-reconcile`` is defence in depth: a running execution idle for five leases with
  no live workflow task gets one, an Operation job that finished without recording its
  outcome (crash quarantine, bulk cancel) has it recorded, and an Operation whose job
  vanished (deleted by hand) gets it back (:mod:`headgate_django.store.durable_repair`
  says how, and why that neither loses nor doubles an effect), the jobs a cancelled
  execution left live (its cancel cut short by a crash) are cancelled, and the children of a
  parent that finished without closing them (a crash right after its end) get their
  ``parent_close_policy``.

Every worker registers both at start-up, and most never run them (one process holds each
lease): the durable store and runtime they use load with the first run that finds an
execution in the store.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.store.durable_exists import execution_exists
from headgate_django.worker.duties import Duty

log = logging.getLogger("headgate_django.durable")

#: How much one run of a duty handles, in each of its parts: executions (and ended runs)
#: vacuumed, stalled executions revived, executions swept for vanished Operations,
#: cancelled executions' live jobs, orphaning parents. A full slice runs again soon, or
#: the next run takes the next slice: bounded runs keep a singleton duty's lease short.
BATCH = 100
#: Where the next sweep for vanished Operation jobs starts: each run reads one slice of the
#: idle live executions, by id, and wraps round. Per process; a fresh one starts from "".
_sweep = {"after": ""}
#: Finished parents whose children one reconcile run closes; where the next run starts (a
#: parent's id). Per process, like ``_sweep``: one slice a run, by id, wrapping round, so
#: parents whose close keeps failing cannot hold the first slice for ever.
_orphans = {"after": ""}


def vacuum() -> dict[str, Any]:
    retention = headgate_settings.DURABLE_RETENTION
    if not retention or retention <= timedelta(0) or not execution_exists():
        return {"deleted": 0, "runs": 0, "more": False}
    from headgate_django.store.durable import execution_vacuum
    from headgate_django.store.durable_runs import runs_prune

    deleted = execution_vacuum(older_than=retention, limit=BATCH)
    if deleted:
        log.info(
            "vacuumed %d durable execution(s) finished more than %s ago",
            len(deleted),
            retention,
            extra={"executions": deleted},
        )
    runs = runs_prune(older_than=retention, limit=BATCH)
    # A full batch runs again on the next tick: a batch a minute could not keep up with
    # more than a batch of executions (or runs) finishing a minute.
    more = len(deleted) >= BATCH or runs >= BATCH
    return {"deleted": len(deleted), "runs": runs, "more": more}


def reconcile() -> dict[str, Any]:
    if not execution_exists():  # then every part below finds nothing
        _sweep["after"] = ""  # as a sweep that found no live execution leaves it
        _orphans["after"] = ""
        return {"revived": 0, "settled": 0, "restored": 0, "cancelled": 0, "closed": 0}
    from headgate_django.durable.children import close_orphans
    from headgate_django.store.durable import execution_reconcile

    report = execution_reconcile(stalled_for=headgate_settings.LEASE_TTL * 5, limit=BATCH)
    for execution_id in report["revived"]:
        log.warning("execution %s had no live workflow task: revived it", execution_id)
    for execution_id in report["settled"]:
        log.warning(
            "execution %s had Operation jobs finished without a recorded outcome: recorded",
            execution_id,
        )
    report["restored"] = restore_vanished_operations()
    report["cancelled"] = finish_cut_cancels()
    report["closed"], _orphans["after"] = close_orphans(after=_orphans["after"], limit=BATCH)
    for execution_id in report["closed"]:
        log.warning("execution %s had finished without closing its children: closed", execution_id)
    return {key: len(ids) for key, ids in report.items()}


def finish_cut_cancels() -> list[str]:
    """Cancel the jobs that a cancelled execution left live (its cancel was cut short
    between its two transactions); return their ids."""
    from headgate_django.store.durable_jobs import jobs_left_by_cancels
    from headgate_django.store.operator import job_cancel_many

    left = jobs_left_by_cancels(limit=BATCH)
    if left and job_cancel_many(left):
        log.warning("cancelled executions had live jobs: cancelled %s", ", ".join(left))
    return left


def restore_vanished_operations() -> list[str]:
    """Put back the jobs of Operations that vanished, one slice of executions per call;
    return the execution keys restored."""
    from headgate_django.durable.workflow_task import operation_job
    from headgate_django.kernel.replay_events import ScheduleOperation
    from headgate_django.store import durable_repair

    vanished, _sweep["after"] = durable_repair.operation_find_vanished(
        idle_for=headgate_settings.LEASE_TTL * 5, after=_sweep["after"], limit=BATCH
    )
    restored = []
    for op in vanished:
        command = ScheduleOperation(op.command_id, op.name, op.version, op.input, op.execution_key)
        envelope = operation_job(op.execution_id, op.task_queue, command)
        how = durable_repair.operation_restore(op, envelope)
        if how is not None:
            log.warning(
                "Operation job %s of execution %s had vanished: restored (%s)",
                op.execution_key,
                op.execution_id,
                "uncertain, for an operator's decision" if how == "uncertain" else "to run again",
            )
            restored.append(op.execution_key)
    return restored


def vacuum_duty() -> Duty:
    return Duty("durable-vacuum", headgate_settings.DUTY_INTERVAL.total_seconds() * 60, vacuum)


def reconcile_duty() -> Duty:
    return Duty(
        "durable-reconcile", headgate_settings.DUTY_INTERVAL.total_seconds() * 10, reconcile
    )

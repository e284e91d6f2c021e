"""The durable runtime's maintenance duties, run as singleton duties by the workers.

- ``durable-vacuum`` deletes terminal executions (with history, signals and jobs) after
  ``HEADGATE['DURABLE_RETENTION']`` (default 30 days; None or 0 keeps them forever).
- ``durable-reconcile`` is defence in depth: a running execution idle for five leases with
  no live workflow task gets one, and an Operation job that finished without recording its
  outcome (crash quarantine, bulk cancel) has it recorded.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.store import durable as store
from headgate_django.worker.duties import Duty

log = logging.getLogger("headgate_django.durable")

VACUUM_BATCH = 100


def vacuum() -> dict[str, Any]:
    retention = headgate_settings.DURABLE_RETENTION
    if not retention or retention <= timedelta(0):
        return {"deleted": 0}
    deleted = store.execution_vacuum(older_than=retention, limit=VACUUM_BATCH)
    if deleted:
        log.info(
            "vacuumed %d durable execution(s) finished more than %s ago",
            len(deleted),
            retention,
            extra={"executions": deleted},
        )
    return {"deleted": len(deleted)}


def reconcile() -> dict[str, Any]:
    report = store.execution_reconcile(stalled_for=headgate_settings.LEASE_TTL * 5)
    for execution_id in report["revived"]:
        log.warning("execution %s had no live workflow task: revived it", execution_id)
    for execution_id in report["settled"]:
        log.warning(
            "execution %s had Operation jobs finished without a recorded outcome: recorded",
            execution_id,
        )
    return {key: len(ids) for key, ids in report.items()}


def vacuum_duty() -> Duty:
    return Duty("durable-vacuum", headgate_settings.DUTY_INTERVAL.total_seconds() * 60, vacuum)


def reconcile_duty() -> Duty:
    return Duty(
        "durable-reconcile", headgate_settings.DUTY_INTERVAL.total_seconds() * 10, reconcile
    )

"""A durable execution's history grows by rows: each pass appends its events and updates a
few header columns, and never rewrites what earlier passes stored. So the writes of one
pass are the same late in a long workflow as early in it, and the work a workflow writes
grows linearly with its steps, not with their square (``benchmarks/durable_growth.py``
measures 5,000 steps, and what the replay itself costs per pass)."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from django.db import connection

from headgate_django import testing
from headgate_django.models import Execution, HistoryEvent
from tests.app import durable_tasks  # noqa: F401  (registers the definitions here too)
from tests.durable.helpers import start

pytestmark = pytest.mark.django_db

STEPS = 300


def _writes_per_job(workflow_id: str) -> list[int]:
    """Bytes of the parameters of every INSERT, UPDATE and DELETE, per job run, until the
    workflow has no job left to run."""
    written: list[int] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            written[-1] += len(str(params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        while True:
            written.append(0)
            if not testing.run_jobs(max_jobs=1).outcomes:
                return written[:-1]


def test_a_pass_late_in_a_long_workflow_writes_what_one_early_in_it_writes() -> None:
    workflow_id = start("it-steps", STEPS)
    written = _writes_per_job(workflow_id)
    execution = Execution.objects.get(pk=workflow_id)
    assert execution.state == "succeeded"
    assert execution.result == list(range(STEPS))
    # started, then each Operation scheduled and completed, then completed
    assert HistoryEvent.objects.filter(execution_id=workflow_id).count() == 2 * STEPS + 2
    # a pass and an Operation job per step; the last pass also writes the result
    early, late = written[20:120], written[-120:-20]
    assert statistics.mean(late) < 1.1 * statistics.mean(early), (early, late)
    assert max(late) < 2 * max(early), (early, late)

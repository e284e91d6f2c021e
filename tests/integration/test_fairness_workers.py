"""Tenant fairness across real worker processes: tenant A enqueues 2,000 jobs, then tenant
B enqueues 20; with workers of concurrency 4 (one process, then two sharing the queue),
every B job starts before A's 200th job starts. The handlers' own start records say so."""

from __future__ import annotations

import dataclasses

import pytest

from headgate_django import admission, enqueue
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "fair-workers"


def tenant_jobs(tenant: str, n: int) -> None:
    for start in range(0, n, 500):
        enqueue(
            [
                dataclasses.replace(
                    tasks.record_run.envelope(label=tenant), queue=QUEUE, partition_key=tenant
                )
                for _ in range(min(500, n - start))
            ]
        )


@pytest.mark.parametrize("processes", [1, 2])
def test_a_new_tenant_starts_before_the_backlog_runs_far(start_worker, processes):
    admission.set_fairness(QUEUE)
    tenant_jobs("A", 2000)
    tenant_jobs("B", 20)
    env = headgate_env(**FAST)
    args = ("--queue", QUEUE, "--concurrency", "4", "--burst")
    workers = [start_worker(*args, env=env) for _ in range(processes)]

    def b_done() -> bool:
        return Execution.objects.filter(label="B").count() == 20

    wait_for(b_done, timeout=120, interval=0.1)
    # By the instant each handler began its record (taken before its insert waits for
    # SQLite's write lock, which other writers may hold for a while), not by row id.
    starts = list(Execution.objects.order_by("started_at", "id").values_list("label", flat=True))
    for worker in workers:
        worker.kill()
    last_b = max(i for i, label in enumerate(starts) if label == "B")
    assert starts[:last_b].count("A") < 200, "".join(starts[: last_b + 1])

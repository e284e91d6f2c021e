"""A real ``runworkers`` in the registry: it appears with what it serves, its counters and
per-minute outcomes follow the jobs it runs, a clean stop marks it stopped, and a SIGKILL
leaves it to be shown as gone once it has missed three heartbeats."""

from __future__ import annotations

import pytest

from headgate_django.store.workers import queue_minutes, worker_get, worker_list
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import headgate_env, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BEAT = 0.2


def registered(pid: int):
    return next((w for w in worker_list() if w.pid == pid), None)


def test_a_worker_registers_counts_and_stops_cleanly(start_worker):
    worker = start_worker(
        "--queue", "default", "--concurrency", "3", env=headgate_env(WORKER_HEARTBEAT=BEAT)
    )
    wait_serving(worker)
    row = wait_for(lambda: registered(worker.pid))
    assert row.status == "live" and row.queues == ["default"] and row.concurrency == 3
    assert row.heartbeat_s == BEAT and row.stopped_at is None
    for i in range(4):
        tasks.echo.enqueue(value=i)
    tasks.flaky.enqueue()  # one retry (in the per-minute series), then completes later

    def totals() -> list[int]:
        rows = queue_minutes()[1].get("default", [])
        return [sum(r[i] for r in rows) for i in (1, 2, 3)]

    wait_for(lambda: totals()[0] >= 4 and totals()[2] >= 1)

    # The registry row is written at each heartbeat, the per-minute series at each flush:
    # the row may still be the one of a beat before the retry, so wait for it to show it.
    def counted():
        row = registered(worker.pid)
        return row if row.completed >= 4 and row.retried >= 1 else None

    row = wait_for(counted)
    assert row.claimed >= 5 and row.failed == 0
    assert worker.terminate() == 0
    row = worker_get(row.id)
    assert row.status == "stopped" and row.stopped_at is not None
    assert row.completed >= 4


def test_a_killed_worker_is_shown_gone(start_worker):
    worker = start_worker("--queue", "default", env=headgate_env(WORKER_HEARTBEAT=BEAT))
    wait_serving(worker)
    row = wait_for(lambda: registered(worker.pid))
    assert row.status == "live"
    worker.kill()
    gone = wait_for(lambda: worker_get(row.id).status == "gone", timeout=10)
    assert gone
    assert worker_get(row.id).stopped_at is None


def test_a_second_worker_given_a_live_workers_id_exits_one_and_a_restart_after_a_crash_starts(
    start_worker,
):
    # Heartbeats far apart: the killed worker's row still counts as live at the restart.
    env = headgate_env(WORKER_HEARTBEAT=30)
    first = start_worker("--worker-id", "dup", env=env)
    wait_serving(first)
    wait_for(lambda: worker_get("dup"))

    second = start_worker("--worker-id", "dup", env=env)
    assert second.proc.wait(timeout=60) == 1, second.output()
    assert "a live worker runs under the id 'dup'" in second.output()
    assert " serving " not in second.output()
    assert first.proc.poll() is None
    assert worker_get("dup").pid == first.pid  # its row is still the first worker's

    first.kill()  # a crash: no clean stop, and its row is not shown gone for 90 s
    assert worker_get("dup").status == "live"
    restarted = start_worker("--worker-id", "dup", env=env)  # as a supervisor would
    wait_serving(restarted)
    wait_for(lambda: worker_get("dup").pid == restarted.pid)
    assert restarted.terminate() == 0

"""Periodic schedules with real ``runworkers`` processes: one job per tick across three
workers and a kill -9 of the scheduler's holder, and ``on_missed`` after every worker was
stopped. Jobs are counted from what their handlers saw (``ctx.periodic_origin``)."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.db import connection

from headgate_django import schedules
from headgate_django.kernel.schedule_origin import origin_of
from headgate_django.kernel.schedule_spec import parse_spec, previous_ticks
from headgate_django.models import DutyLease, Job, Schedule
from headgate_django.schedules import scheduler, targets
from headgate_django.store import db_now
from headgate_django.store.schedules import schedule_due
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SECOND = timedelta(seconds=1)


def jobs_per_tick(name: str) -> dict[int, set[str]]:
    """Tick (epoch seconds) → the ids of the jobs whose handler ran for it."""
    seen: dict[int, set[str]] = defaultdict(set)
    for job_id, label in Execution.objects.filter(label__startswith=f"{name}@").values_list(
        "job_id", "label"
    ):
        seen[int(label.rpartition("@")[2])].add(job_id)
    return seen


def scheduler_holder_pid() -> int:
    holder = wait_for(lambda: DutyLease.objects.filter(name="scheduler").exclude(holder="").first())
    return int(holder.holder.rsplit(":", 2)[1])  # type: ignore[attr-defined]


def test_every_tick_runs_once_across_three_workers_and_a_killed_scheduler(start_worker):
    env = headgate_env(**FAST)
    first = schedules.upsert(
        "it-every", "@every 1s", tasks.periodic.envelope(), on_missed="backfill", backfill_limit=60
    ).next_run_at
    assert first is not None
    workers = [start_worker("--lease-ttl", "2", env=env) for _ in range(3)]
    for worker in workers:
        wait_serving(worker)
    time.sleep(3)
    holder = scheduler_holder_pid()
    victim = next(w for w in workers if w.pid == holder)
    victim.kill()  # the scheduler's holder: nobody schedules until its duty lease lapses
    time.sleep(5)
    end = db_now()
    wait_for(lambda: (schedules.get("it-every").next_run_at or end) > end, timeout=60)
    ticks = range(int(first.timestamp()), int(end.timestamp()) + 1)
    wait_for(lambda: set(ticks) <= set(jobs_per_tick("it-every")), timeout=60)
    schedules.pause("it-every")
    # A tick enqueued after `end` and before the pause may not have run yet: let it.
    tick_rows = Job.objects.filter(id__startswith="sched:it-every:")
    wait_for(lambda: not tick_rows.exclude(state="completed").exists(), timeout=60)

    seen = jobs_per_tick("it-every")
    assert len(ticks) >= 8
    doubled = {tick: ids for tick, ids in seen.items() if len(ids) != 1}
    assert doubled == {}, f"ticks with more than one job: {doubled}"
    for tick in ticks:
        (job_id,) = seen[tick]
        origin = origin_of(job_id)
        assert origin is not None and int(origin.tick_at.timestamp()) == tick
    tick_jobs = Job.objects.filter(id__startswith="sched:it-every:").count()
    assert tick_jobs == len(seen)
    assert scheduler_holder_pid() != victim.pid
    for worker in workers:
        if worker is not victim:
            assert worker.terminate() == 0


@pytest.mark.parametrize(
    ("on_missed", "limit", "expected"), [("skip", 10, 0), ("run_once", 10, 1), ("backfill", 3, 3)]
)
def test_on_missed_after_every_worker_was_stopped(start_worker, on_missed, limit, expected):
    grace = 0.5
    env = headgate_env(**FAST, SCHEDULE_GRACE=grace)
    name = f"it-{on_missed}"
    schedules.upsert(
        name, "@every 1s", tasks.periodic.envelope(), on_missed=on_missed, backfill_limit=limit
    )
    worker = start_worker(env=env)
    wait_serving(worker)
    wait_for(lambda: len(jobs_per_tick(name)) >= 2, timeout=60)
    assert worker.terminate() == 0
    last_before = max(e.tick_at for e in schedules.events(name) if e.outcome == "enqueued")
    time.sleep(5.5)  # at least five ticks that no worker is there to fire
    worker = start_worker(env=env)
    wait_serving(worker)

    def first_pass_after_restart():
        return next((e for e in schedules.events(name) if e.tick_at > last_before), None)

    wait_for(lambda: (schedules.get(name).next_run_at or last_before) > db_now(), timeout=60)
    wait_for(first_pass_after_restart, timeout=60)
    assert worker.terminate() == 0

    # The pass after the restart decided at ``recorded_at``: ticks older than the grace
    # then were missed, and on_missed alone decided which of them fired.
    after = [e for e in schedules.events(name) if e.tick_at > last_before]
    decided_at = min(e.recorded_at for e in after if e.recorded_at is not None)
    cutoff = decided_at - timedelta(seconds=grace)
    missed = int((cutoff - last_before) / SECOND)
    assert missed >= 5
    fired = [e.tick_at for e in after if e.outcome == "enqueued" and e.tick_at <= cutoff]
    assert len(fired) == expected
    if on_missed != "skip":  # the newest missed ticks, not the oldest
        newest = max(t for t in fired)
        assert cutoff - newest < SECOND
    assert [e.outcome for e in after if e.outcome == "skipped"] == ["skipped"]
    seen = jobs_per_tick(name)
    assert all(len(ids) == 1 for ids in seen.values())


def test_two_overlapping_passes_enqueue_each_tick_once(monkeypatch):
    """Two holders at once (one stalled while its lease lapsed, as under SIGSTOP): both
    read the same due schedule; the first stalls inside its transaction, holding the
    schedule's row, while the second tries the same ticks."""
    schedules.upsert("it-overlap", "@every 1h", tasks.periodic.envelope(), on_missed="backfill")
    current = previous_ticks(parse_spec("@every 1h"), db_now(), 1)[0]
    Schedule.objects.filter(name="it-overlap").update(next_run_at=current - 2 * timedelta(hours=1))
    now, (stale,) = schedule_due(limit=10)
    stalled, resume = threading.Event(), threading.Event()
    write = targets.write

    def stalling_write(firing, using):
        outcome = write(firing, using)
        if threading.current_thread().name == "first":
            stalled.set()
            resume.wait(30)
        return outcome

    monkeypatch.setattr(targets, "write", stalling_write)
    results: dict[str, Counter[str]] = {}

    def holder(name: str) -> None:
        try:
            results[name] = scheduler.fire_schedule(stale, now)
        finally:
            connection.close()

    first = threading.Thread(target=holder, args=("first",), name="first")
    second = threading.Thread(target=holder, args=("second",), name="second")
    first.start()
    assert stalled.wait(30)
    second.start()
    time.sleep(0.5)  # let the second reach the first's lock before it commits
    resume.set()
    first.join(30)
    second.join(30)
    assert results == {"first": Counter(enqueued=3), "second": Counter(deduplicated=3)}
    assert Job.objects.filter(id__startswith="sched:it-overlap:").count() == 3
    outcomes = Counter(e.outcome for e in schedules.events("it-overlap"))
    assert outcomes == Counter(enqueued=3, deduplicated=3)

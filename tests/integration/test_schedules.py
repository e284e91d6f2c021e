"""Periodic schedules with real ``runworkers`` processes: one job per tick across three
workers and a kill -9 of the scheduler's holder, and ``on_missed`` after every worker was
stopped, and a holder SIGSTOPped past its lease while a second one takes over. Jobs are
counted from what their handlers saw (``ctx.periodic_origin``)."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from datetime import timedelta

import pytest

from headgate_django import schedules
from headgate_django.kernel.schedule_origin import origin_of, tick_id
from headgate_django.kernel.schedule_spec import parse_spec, previous_ticks
from headgate_django.models import DutyLease, Job, Schedule
from headgate_django.store import db_now
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, wait_serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clear_of_the_hour"),
]

SECOND = timedelta(seconds=1)
DAY = timedelta(days=1)


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
    # Another worker takes the duty over once the lease lapses. (The ticks the victim wrote
    # ahead, up to SCHEDULE_LOOKAHEAD, cover part of the wait: they run all the same.)
    wait_for(lambda: scheduler_holder_pid() != victim.pid, timeout=60)
    time.sleep(2)
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
    # Ticks written ahead (the lookahead) before the stop are not missed: they wait, and run
    # after the restart. The outage is five ticks longer than the lookahead.
    lookahead = 1.0
    env = headgate_env(**FAST, SCHEDULE_GRACE=grace, SCHEDULE_LOOKAHEAD=lookahead)
    name = f"it-{on_missed}"
    schedules.upsert(
        name, "@every 1s", tasks.periodic.envelope(), on_missed=on_missed, backfill_limit=limit
    )
    worker = start_worker(env=env)
    wait_serving(worker)
    wait_for(lambda: len(jobs_per_tick(name)) >= 2, timeout=60)
    assert worker.terminate() == 0
    last_before = max(e.tick_at for e in schedules.events(name) if e.outcome == "enqueued")
    time.sleep(5.5 + lookahead)  # at least five ticks that no worker is there to fire
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


def clear_of_midnight(margin: float = 300.0) -> None:
    """Wait out the last minutes of a UTC day, when a daily tick would come due mid-test."""
    left = 86400 - time.time() % 86400
    if left < margin:
        time.sleep(left + 1)


def test_a_holder_stopped_past_its_lease_loses_its_pass_to_the_next_one(start_worker, tmp_path):
    """Two holders for real: the scheduler's holder is SIGSTOPped in the middle of a pass
    (after it read the due schedules, before it wrote) until its duty lease lapses; a
    second worker takes the duty over and fires the ticks; then the first is SIGCONTed
    and finishes its pass. One job and one workflow per tick; its events say
    ``deduplicated``.

    Daily ticks: the test takes a minute or more, and an hourly schedule whose next tick
    came due meanwhile (seen in a run at 03:59) fired a third tick that every count here
    then included."""
    clear_of_midnight()
    marker = tmp_path / "stalled.pid"
    env = {**headgate_env(**FAST), "HEADGATE_TEST_STALL_MARKER": str(marker)}
    names = ("it-over-task", "it-over-wf")
    schedules.upsert(names[0], "@every 1d", tasks.periodic.envelope(), on_missed="backfill")
    schedules.upsert(
        names[1], "@every 1d", schedules.workflow("test-stall-once"), on_missed="backfill"
    )
    current = previous_ticks(parse_spec("@every 1d"), db_now(), 1)[0]
    ticks = {current - DAY, current}
    Schedule.objects.filter(name__in=names).update(next_run_at=current - DAY)

    first = start_worker(env=env)
    wait_for(marker.exists, timeout=60)
    stalled = int(wait_for(lambda: marker.read_text().strip()))
    os.kill(stalled, signal.SIGSTOP)  # inside the factory, in the first holder's pass
    try:
        lease = DutyLease.objects.get(name="scheduler")
        assert lease.holder.rsplit(":", 2)[1] == str(stalled)
        second = start_worker(env=env)
        wait_serving(second)
        # The second takes the duty once the first's lease lapsed, and fires both ticks.
        wait_for(lambda: scheduler_holder_pid() != stalled, timeout=60)
        wait_for(
            lambda: all((schedules.get(n).next_run_at or current) > current for n in names),
            timeout=60,
        )
        assert not any(e.outcome == "deduplicated" for n in names for e in schedules.events(n))
    finally:
        os.kill(stalled, signal.SIGCONT)

    def lost(name: str) -> list[schedules.ScheduleEventView]:
        return [e for e in schedules.events(name) if e.outcome == "deduplicated"]

    wait_for(lambda: all(len(lost(n)) == 2 for n in names), timeout=60)
    for name in names:
        events = schedules.events(name)
        assert {e.tick_at for e in lost(name)} == ticks
        assert all(e.reason == "fired by another pass" for e in lost(name))
        enqueued = [e for e in events if e.outcome == "enqueued"]
        assert sorted(e.tick_at for e in enqueued) == sorted(ticks)
        assert len(events) == 4
    wait_for(lambda: set(jobs_per_tick(names[0])) == {int(t.timestamp()) for t in ticks})
    seen = jobs_per_tick(names[0])
    assert all(len(ids) == 1 for ids in seen.values()), seen
    assert Job.objects.filter(id__startswith=f"sched:{names[0]}:").count() == 2
    workflows = set(Job.objects.exclude(workflow_id=None).values_list("workflow_id", flat=True))
    assert workflows == {tick_id(names[1], t) for t in ticks}
    nodes = Job.objects.filter(workflow_id__isnull=False).exclude(kind="headgate:workflow")
    assert sorted(nodes.values_list("workflow_id", flat=True)) == sorted(workflows)
    assert second.terminate() == 0
    assert first.terminate() == 0


def test_no_duties_workers_never_schedule(start_worker):
    """``runworkers --no-duties`` serves jobs but never fires a tick; a worker with duties
    then fires the same schedule at once."""
    env = headgate_env(**FAST)
    schedules.upsert("it-noduties", "@every 1s", tasks.periodic.envelope(), on_missed="backfill")
    tasks.periodic.enqueue(label="served")
    quiet = start_worker("--no-duties", env=env)
    wait_serving(quiet)
    wait_for(lambda: Execution.objects.filter(label="none").exists(), timeout=60)  # it serves
    time.sleep(2.5)  # ticks come due and nobody fires them
    assert schedules.events("it-noduties") == []
    assert not Job.objects.filter(id__startswith="sched:it-noduties:").exists()
    assert not DutyLease.objects.filter(name="scheduler").exclude(holder="").exists()
    duties = start_worker(env=env)
    wait_for(lambda: jobs_per_tick("it-noduties"), timeout=60)
    assert quiet.terminate() == 0
    assert duties.terminate() == 0

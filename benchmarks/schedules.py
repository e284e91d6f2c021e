#!/usr/bin/env python
"""Scheduler lag and cost: 10,000 schedules due every minute, one scheduler.

    .venv/bin/python benchmarks/schedules.py --database sqlite|postgres|both [--quick]

For each database (a fresh SQLite file, or the PostgreSQL database ``headgate_bench_sched``
dropped and recreated) the script upserts N ``* * * * *`` schedules of a no-op task and
gives each one the events a long-running schedule has (100, the number kept, so the trim
check reads what it reads in production). From the lookahead and two seconds before the
next minute it runs the scheduler's pass in this process as the ``scheduler`` duty does (a
pass, then a pause of the duty's 0.5 s interval, or less when the next tick is due sooner:
the duty's wake-up) and the promote duty, on the worker's 50 ms heartbeat, until every
schedule's tick job is claimable. For each tick it reports:

- lag: from the tick instant until the tick's job is claimable (``available``), on the
  store clock, sampled every heartbeat (p50, p99, max over the N jobs); task ticks are
  written up to ``SCHEDULE_LOOKAHEAD`` ahead, scheduled for their instant, and the promote
  duty (run here as a worker runs it) makes them available; when each was written
  relative to its tick is printed too;
- the passes' busy time and its cost per schedule (a share of one locking read, one
  ``UPDATE`` per batch, one job insert and one event insert per batch of 500).

Target on PostgreSQL: lag p50 and p99 ≤ 1 s with one scheduler for 10,000 schedules.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import PG_SERVER, machine  # noqa: E402

PG_DB = "headgate_bench_sched"
SIZES = {
    "full": {"schedules": 10_000, "ticks": 3, "events": 100},
    "quick": {"schedules": 2_000, "ticks": 1, "events": 100},
}
HEARTBEAT = 0.05  # the worker loop's period, which runs due duties


def env_for(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", DATABASE_URL=url, PYTHONPATH=str(ROOT))
    return env


def fresh_database(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench-sched.sqlite3'}"
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return f"{PG_SERVER}/{PG_DB}"


def child(url: str, size: str) -> None:
    os.environ.update(env_for(url))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from benchmarks.benchapp.tasks import noop
    from headgate_django import schedules

    n, ticks = SIZES[size]["schedules"], SIZES[size]["ticks"]
    started = time.perf_counter()
    for i in range(n):
        schedules.upsert(f"bench-{i:05d}", "* * * * *", noop.envelope())
    upsert_s = time.perf_counter() - started
    print(
        f"{url.split(':')[0]}: {n} schedules upserted in {upsert_s:.1f} s "
        f"({upsert_s / n * 1000:.2f} ms each)"
    )
    seed_events(n, SIZES[size]["events"])
    results = [run_tick(n) for _ in range(ticks)]
    for r in results:
        report(n, r)
    print("  median of the ticks:")
    report(n, {k: statistics.median(r[k] for r in results) for k in results[0]})


def seed_events(n: int, per_schedule: int) -> None:
    """Give every schedule ``per_schedule`` past events, as after a long run."""
    from datetime import UTC, datetime

    from headgate_django.models import ScheduleEvent

    base = datetime(2026, 1, 1, tzinfo=UTC)
    rows = (
        ScheduleEvent(
            schedule_name=f"bench-{i:05d}",
            tick_at=base + timedelta(minutes=k),
            outcome="enqueued",
            recorded_at=base + timedelta(minutes=k),
        )
        for k in range(per_schedule)
        for i in range(n)
    )
    ScheduleEvent.objects.bulk_create(rows, batch_size=5000)
    from django.db import connection

    with connection.cursor() as cursor:  # as autovacuum would after a million rows
        cursor.execute("ANALYZE")


def run_tick(n: int) -> dict[str, float]:
    """From before the next minute (the lookahead and 2 s more), run the scheduler and the
    promotion as a worker's duties do, until all N tick jobs are claimable."""
    from headgate_django.conf import headgate_settings
    from headgate_django.models import Job, Schedule
    from headgate_django.schedules.scheduler import run_pass, wake_in
    from headgate_django.store import db_now
    from headgate_django.worker.duties import _promote

    lead = headgate_settings.SCHEDULE_LOOKAHEAD.total_seconds() + 2
    now = db_now()
    tick = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if (tick - now).total_seconds() < lead + 8:
        tick += timedelta(minutes=1)  # time to clear the last tick's jobs first
    Job.objects.all().delete()
    # Every schedule's next tick is this minute (upserting 10,000 takes a minute or more,
    # so without this the first one would be due already, and fire late).
    Schedule.objects.update(next_run_at=tick)
    time.sleep(max(0.0, (tick - now).total_seconds() - lead))
    passes, busy = 0, 0.0
    next_pass = next_promote = time.monotonic()
    available = Job.objects.filter(state="available")
    claimable: list[float] = []  # the store clock's lag behind the tick, per job, sampled
    while len(claimable) < n:
        if time.monotonic() >= next_pass:
            t0 = time.perf_counter()
            fired = run_pass()
            if fired:
                busy += time.perf_counter() - t0
                passes += 1
            wake = wake_in(fired)
            next_pass = time.monotonic() + (0.5 if wake is None else min(0.5, wake))
        if time.monotonic() >= next_promote:  # the promote duty: every 0.2 s, or at once
            more = _promote()["more"]
            next_promote = time.monotonic() + (0.0 if more else 0.2)
        count, seen_at = available.count(), db_now()
        claimable += [max((seen_at - tick).total_seconds(), 0.0)] * (count - len(claimable))
        time.sleep(HEARTBEAT)
    ticks = set(Job.objects.values_list("scheduled_at", flat=True))
    assert ticks == {tick}, f"jobs of other ticks: {sorted(ticks)[:3]}"
    written = sorted(
        (enqueued - tick).total_seconds()
        for enqueued in Job.objects.values_list("enqueued_at", flat=True)
    )
    return {
        "p50": claimable[n // 2],
        "p99": claimable[int(n * 0.99) - 1],
        "max": claimable[-1],
        "written_p50": statistics.median(written),
        "written_max": written[-1],
        "busy": busy,
        "passes": passes,
    }


def report(n: int, r: dict[str, float]) -> None:
    print(
        f"  tick: claimable lag p50 {r['p50'] * 1000:.0f} ms, p99 {r['p99'] * 1000:.0f} ms, "
        f"max {r['max'] * 1000:.0f} ms; written at tick {r['written_p50']:+.2f} s (median), "
        f"last {r['written_max']:+.2f} s; {r['passes']:.0f} pass(es) busy {r['busy']:.2f} s, "
        f"{r['busy'] / n * 1000:.3f} ms per schedule"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = "quick" if args.quick else "full"
    if args.child:
        child(args.child, size)
        return
    print(", ".join(f"{k}: {v}" for k, v in machine().items()))
    kinds = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            url = fresh_database(kind, Path(tmp))
            cmd = [sys.executable, __file__, "--child", url] + (["--quick"] if args.quick else [])
            subprocess.run(cmd, check=True, env=env_for(url))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Scheduler lag and cost: 10,000 schedules due every minute, one scheduler.

    .venv/bin/python benchmarks/schedules.py --database sqlite|postgres|both [--quick]

For each database (a fresh SQLite file, or the PostgreSQL database ``headgate_bench_sched``
dropped and recreated) the script upserts N ``* * * * *`` schedules of a no-op task, waits
for the next minute, and then runs the scheduler's pass in this process as the
``scheduler`` duty would (a pass, then the duty's 0.5 s pause while nothing is due), until
every schedule's tick is enqueued. For each tick it reports:

- lag: the tick job's ``enqueued_at`` minus the tick instant, both on the store clock
  (p50, p99, max over the N jobs);
- the pass's wall time and its cost per schedule (one compare-and-set, one job insert and
  one event per schedule).

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
SIZES = {"full": {"schedules": 10_000, "ticks": 2}, "quick": {"schedules": 2_000, "ticks": 1}}


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
    for _ in range(ticks):
        report(n, run_tick(n))


def run_tick(n: int) -> dict[str, float]:
    """Wait for the next minute, then pass as the duty does until all N ticks are in."""
    from headgate_django.models import Job
    from headgate_django.schedules.scheduler import run_pass
    from headgate_django.store import db_now

    now = db_now()
    tick = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    time.sleep(max(0.0, (tick - now).total_seconds()))
    Job.objects.all().delete()
    passes, busy = 0, 0.0
    while Job.objects.count() < n:
        t0 = time.perf_counter()
        fired = run_pass()
        if fired:
            busy += time.perf_counter() - t0
            passes += 1
        else:
            time.sleep(0.5)  # the duty's interval
    lags = sorted(
        (enqueued - tick).total_seconds()
        for enqueued in Job.objects.values_list("enqueued_at", flat=True)
    )
    return {
        "p50": statistics.median(lags),
        "p99": lags[int(len(lags) * 0.99) - 1],
        "max": lags[-1],
        "busy": busy,
        "passes": passes,
    }


def report(n: int, r: dict[str, float]) -> None:
    print(
        f"  tick: lag p50 {r['p50'] * 1000:.0f} ms, p99 {r['p99'] * 1000:.0f} ms, "
        f"max {r['max'] * 1000:.0f} ms; {r['passes']:.0f} pass(es) busy {r['busy']:.2f} s, "
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

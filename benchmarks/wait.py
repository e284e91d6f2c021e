#!/usr/bin/env python
"""Enqueue-and-wait round trip: a 0.5 s job through a real ``runworkers`` process.

    .venv/bin/python benchmarks/wait.py [--database postgres|sqlite] [--runs N]

Builds a fresh database (PostgreSQL ``headgate_bench_wait`` dropped and recreated, or a
SQLite file), migrates it, starts ``manage.py runworkers --concurrency 4`` and, once it
serves, times ``sleep.enqueue_and_wait(seconds=0.5)`` N times from this process: first as
shipped (PostgreSQL: LISTEN/NOTIFY plus a read every 100 ms), then, as the baseline in the
same run, with the waiter polling (``LISTEN_NOTIFY`` off in this process only; the worker
is unchanged). Prints the median and max of each and the overhead over the job's 0.5 s.

Acceptance (PostgreSQL): median round trip < 0.6 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import PG_SERVER, machine  # noqa: E402

PG_DB = "headgate_bench_wait"
JOB_SECONDS = 0.5
TARGET = 0.6


def fresh_database(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench-wait.sqlite3'}"
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return f"{PG_SERVER}/{PG_DB}"


def timed(runs: int, legs: list[tuple[float, float, float, float]] | None = None) -> list[float]:
    """Round trips in seconds; with ``legs``, also where each went (enqueue → claim,
    claim → handler end, end → finalized, finalized → the waiter's return)."""
    from benchmarks.benchapp.tasks import sleep
    from headgate_django.models import Job

    took = []
    for _ in range(runs):
        t0 = time.time()
        started = time.perf_counter()
        result = sleep.enqueue_and_wait(seconds=JOB_SECONDS, timeout=60)
        took.append(time.perf_counter() - started)
        back = time.time()
        assert result.ok, result
        if legs is not None:
            row = Job.objects.get(pk=result.job_id)
            assert row.claimed_at and row.finalized_at
            claimed, finalized = row.claimed_at.timestamp(), row.finalized_at.timestamp()
            legs.append(
                (
                    claimed - t0,
                    JOB_SECONDS,
                    finalized - claimed - JOB_SECONDS,
                    back - finalized,
                )
            )
    return took


def line(label: str, took: list[float]) -> str:
    median = statistics.median(took)
    return (
        f"| {label} | {median * 1000:.0f} ms | {max(took) * 1000:.0f} ms | "
        f"{(median - JOB_SECONDS) * 1000:.0f} ms |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    print(", ".join(f"{k}: {v}" for k, v in machine().items()))
    with tempfile.TemporaryDirectory() as tmp:
        url = fresh_database(args.database, Path(tmp))
        os.environ.update(
            DJANGO_SETTINGS_MODULE="benchmarks.settings", DATABASE_URL=url, PYTHONPATH=str(ROOT)
        )
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import override_settings

        call_command("migrate", verbosity=0)
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworkers", "--concurrency", "4"],
            env=dict(os.environ),
            cwd=ROOT,
        )
        try:
            timed(2)  # the worker is serving once a wait returns; warm both sides up
            shipped_legs: list[tuple[float, float, float, float]] = []
            polled_legs: list[tuple[float, float, float, float]] = []
            shipped = timed(args.runs, shipped_legs)
            with override_settings(HEADGATE={"LISTEN_NOTIFY": False}):
                polled = timed(args.runs, polled_legs)
        finally:
            worker.terminate()
            worker.wait(timeout=60)
    print(f"\n{args.database}, {args.runs} runs of a {JOB_SECONDS} s job\n")
    print("| waiter | median | max | median − job |\n|---|---:|---:|---:|")
    print(line("as shipped", shipped))
    print(line("polling (baseline)", polled))
    print("\nmedian legs: enqueue → claimed_at | handler | end → finalized_at | → waiter back")
    for label, legs in (("as shipped", shipped_legs), ("polling", polled_legs)):
        medians = [statistics.median(leg[i] for leg in legs) * 1000 for i in range(4)]
        print(f"  {label}: " + " | ".join(f"{m:.0f} ms" for m in medians))
    median = statistics.median(shipped)
    verdict = "PASS" if median < TARGET else "FAIL"
    print(f"\nmedian {median:.3f} s, target < {TARGET} s: {verdict}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What the worker registry costs a worker, and what the overview and workers pages cost.

    .venv/bin/python benchmarks/workers.py [--repeat 200] [--jobs 200000]

On a fresh PostgreSQL database (``headgate_bench_workers``,
dropped and recreated), each figure a median over ``--repeat`` runs in this process:

1. the heartbeat's registry upsert (``worker_heartbeat``) and a per-minute flush of three
   queues (``queue_minutes_add``): one statement each;
2. the claim path with and without the registry writing beside it: ``job_claim`` of 50
   jobs and their ``job_complete_many``, alone, then while another thread upserts the
   registry row and flushes the minute counts every 5 ms (1,000 times the default
   heartbeat rate, 200 times the flush rate). The ratio is the slowdown;
3. the overview's and the workers page's data (``overview_data``, ``workers_data``) with
   ``--jobs`` finished jobs in the table, 20 queues with a day of minutes and 200
   registered workers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import PG_SERVER  # noqa: E402

PG_DB = "headgate_bench_workers"


def database_url(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench-workers.sqlite3'}"
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return f"{PG_SERVER}/{PG_DB}"


def median_ms(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", choices=["postgres"], default="postgres")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=200_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hg-bench-workers-"))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=database_url(args.database, tmp),
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import close_old_connections, connection

    call_command("migrate", verbosity=0)
    from benchmarks.benchapp.tasks import noop
    from benchmarks.fill import analyze, fill
    from headgate_django import enqueue, store
    from headgate_django.console.dashboard import overview_data, workers_data
    from headgate_django.store.fenced import Completion
    from headgate_django.store.workers import Beat, queue_minutes_add, worker_heartbeat

    beat = Beat("bench:1:abc", "bench", 1, ["default"], 10, timedelta(seconds=5), in_flight=3)
    counts = {"default": (40, 1, 2), "emails": (10, 0, 0), "reports": (1, 0, 1)}
    upsert = median_ms(lambda: worker_heartbeat(beat), args.repeat)
    flush = median_ms(lambda: queue_minutes_add(counts), args.repeat)
    print(
        f"{args.database}: registry upsert {upsert:.3f} ms, minute flush {flush:.3f} ms (medians)"
    )

    def claim_and_ack() -> None:
        jobs = store.job_claim(worker_id="bench", limit=50, lease_ttl=timedelta(minutes=1))
        store.job_complete_many([Completion(j.ref, None) for j in jobs])

    rounds = max(20, args.repeat // 4)
    for _ in range(rounds // 5 + 2):
        enqueue([noop.envelope() for _ in range(500)])
    alone = median_ms(claim_and_ack, rounds)
    stop = threading.Event()

    def registry_writer() -> None:
        while not stop.wait(0.005):
            worker_heartbeat(beat)
            queue_minutes_add(counts)
        close_old_connections()

    writer = threading.Thread(target=registry_writer)
    writer.start()
    beside = median_ms(claim_and_ack, rounds)
    stop.set()
    writer.join()
    print(
        f"{args.database}: claim 50 + ack 50: {alone:.2f} ms alone, {beside:.2f} ms with the "
        f"registry written every 5 ms beside it (ratio {beside / alone:.2f})"
    )

    with connection.cursor() as cursor:
        fill(cursor, connection.vendor, terminal=args.jobs, scheduled=args.jobs // 10)
        analyze(cursor, connection.vendor)
    for n in range(200):
        worker_heartbeat(Beat(f"bench-{n:03d}", "bench", n, None, 4, timedelta(seconds=5)))
    from headgate_django.models import QueueMinute

    with connection.cursor() as cursor:
        cursor.execute("SELECT MAX(minute) FROM headgate_queue_minute", [])
        last = int(cursor.fetchone()[0])
    QueueMinute.objects.bulk_create(
        QueueMinute(queue=f"q{q}", minute=last - m, completed=m % 7)
        for q in range(20)
        for m in range(1, 1440)
    )
    page = median_ms(overview_data, max(10, args.repeat // 10))
    workers = median_ms(workers_data, max(10, args.repeat // 10))
    print(
        f"{args.database}: with {args.jobs} finished jobs: overview data {page:.1f} ms, "
        f"workers data {workers:.1f} ms (medians; the page budget is 200 ms)"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Overload: claim latency against the size of the backlog, and worker memory under
100,000 queued jobs.

    .venv/bin/python benchmarks/overload.py [--database postgres|mariadb] [--seconds 60]
        [--json OUT]

Everything runs against a private database server started for the run (the one the chaos
run uses, ``tests/chaos/servers.py``), migrated, and stopped at the end:

1. claim latency at a backlog of 1,000, 10,000 and 100,000 available no-op jobs: 200
   claims of 8 jobs each (what a worker of 8 handler threads asks for when its slots are
   free), timed around ``store.job_claim`` in this process. Each claimed batch is completed
   and replaced by 8 new jobs (untimed), so the backlog keeps its size. Median and p95, in
   two series from an empty table: "never analyzed" (PostgreSQL's autovacuum is switched
   off for the table, as on a new deployment hit by a burst before autovacuum's first
   ANALYZE), and "analyzed" (an ``ANALYZE`` of the job table after each fill).
2. memory: 4 ``runworkers --concurrency 8`` processes against the 100,000-job backlog for
   ``--seconds``; the resident set (VmRSS) of each is sampled every second. Reported: the
   first sample after start-up, the largest, the last, and jobs completed per second.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import machine  # noqa: E402
from tests.chaos.servers import make_server  # noqa: E402

BACKLOGS = (1_000, 10_000, 100_000)
CLAIMS = 200
CLAIM_SIZE = 8
WORKERS = 4
BULK = 1000


def env_for(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="benchmarks.settings", DATABASE_URL=url, PYTHONPATH=str(ROOT))
    return env


def fill(count: int) -> None:
    from benchmarks.benchapp.tasks import noop
    from headgate_django import enqueue

    for start in range(0, count, BULK):
        enqueue([noop.envelope()] * min(BULK, count - start))


def claim_latency() -> dict[str, float]:
    """Milliseconds per claim of ``CLAIM_SIZE`` jobs, the backlog topped up between claims."""
    from headgate_django import store
    from headgate_django.registry import registered_kinds
    from headgate_django.store.fenced import Completion

    kinds = registered_kinds()
    times = []
    for _ in range(CLAIMS):
        began = time.perf_counter()
        jobs = store.job_claim(
            worker_id="overload", limit=CLAIM_SIZE, lease_ttl=timedelta(seconds=30), kinds=kinds
        )
        times.append((time.perf_counter() - began) * 1000)
        if len(jobs) != CLAIM_SIZE:
            raise RuntimeError(f"claimed {len(jobs)} jobs, not {CLAIM_SIZE}")
        store.job_complete_many([Completion(j.ref) for j in jobs])
        fill(CLAIM_SIZE)
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p95_ms": times[int(len(times) * 0.95) - 1],
        "max_ms": times[-1],
    }


def analyze() -> None:
    """Refresh the planner's statistics of the job table, as autovacuum eventually does."""
    from django.db import connection

    with connection.cursor() as cursor:
        sql = (
            "ANALYZE headgate_job"
            if connection.vendor == "postgresql"
            else "ANALYZE TABLE headgate_job"
        )
        cursor.execute(sql)
        if connection.vendor != "postgresql":
            cursor.fetchall()


def empty_job_table() -> None:
    """TRUNCATE rather than DELETE: InnoDB would still be purging 100,000 deleted index
    entries while the next series claims through them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE TABLE headgate_job")


def autovacuum(enabled: bool) -> None:
    """PostgreSQL: switch autovacuum (and its ANALYZE) of the job table on or off, so the
    "never analyzed" series stays so while it runs. MariaDB keeps its own statistics."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE headgate_job SET (autovacuum_enabled = {'on' if enabled else 'off'})"
            )


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def completed() -> int:
    from headgate_django.models import Job

    return Job.objects.filter(state="completed").count()


def memory(url: str, seconds: float, logdir: Path) -> dict[str, Any]:
    before = completed()
    procs = []
    for n in range(WORKERS):
        log = (logdir / f"worker-{n}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworkers", "--concurrency", "8"],
                env=env_for(url),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    samples: list[list[int]] = [[] for _ in procs]
    try:
        time.sleep(3)  # start-up: imports and the first claims
        began = time.monotonic()
        start_count = completed()
        while time.monotonic() - began < seconds:
            for n, proc in enumerate(procs):
                value = rss_kib(proc.pid)
                if value is None or proc.poll() is not None:
                    raise RuntimeError(f"worker {n} exited; see {logdir}")
                samples[n].append(value)
            time.sleep(1)
        rate = (completed() - start_count) / (time.monotonic() - began)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
    return {
        "rss_mib": [
            {"first": s[0] / 1024, "max": max(s) / 1024, "last": s[-1] / 1024} for s in samples
        ],
        "jobs_per_s": rate,
        "completed_during_run": completed() - before,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database", choices=["postgres", "mariadb"], default="postgres")
    p.add_argument("--seconds", type=float, default=60.0, help="of the memory phase")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error("--seconds must be positive")
    server = make_server(args.database)
    try:
        server.create()
        os.environ.update(env_for(server.url))
        import django

        django.setup()
        from django.core.management import call_command

        from headgate_django.models import Job

        call_command("migrate", verbosity=0)
        results: dict[str, Any] = {"database": args.database, "machine": machine()}
        latency: dict[str, dict[int, dict[str, float]]] = {}
        for series in ("never analyzed", "analyzed"):
            empty_job_table()
            autovacuum(series == "analyzed")
            latency[series] = {}
            for backlog in BACKLOGS:
                fill(backlog - Job.objects.filter(state="available").count())
                if series == "analyzed":
                    analyze()
                figures = latency[series][backlog] = claim_latency()
                print(
                    f"backlog {backlog:>7,} ({series}): claim of {CLAIM_SIZE} median "
                    f"{figures['median_ms']:.2f} ms, p95 {figures['p95_ms']:.2f} ms",
                    flush=True,
                )
        results["claim_latency"] = latency
        results["memory"] = memory(server.url, args.seconds, Path(tempfile.mkdtemp()))
        for n, rss in enumerate(results["memory"]["rss_mib"]):
            print(
                f"worker {n}: RSS {rss['first']:.0f} MiB after start-up, max {rss['max']:.0f}, "
                f"last {rss['last']:.0f}"
            )
        print(f"throughput {results['memory']['jobs_per_s']:.0f} jobs/s with {WORKERS} × 8 threads")
    finally:
        server.destroy()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The drain as worker hosts are added: 1, 2, 4 and 8 ``runworkers`` processes on one queue.

    .venv/bin/python benchmarks/hosts.py [--jobs 20000] [--reps 3] [--concurrency 25]

On a fresh PostgreSQL database (``headgate_bench_hosts``, dropped and recreated), for each
count P it seeds N no-op jobs and starts P separate ``manage.py runworkers --burst
--concurrency C --worker-id host-<i>`` processes at once, as P hosts would, and times the
drain from the first spawn to the last exit and from the first claim to the last
completion (store clock). Processes spawned together also start together, and their
start-up then takes CPU from the drain of those already claiming; a deployment's hosts
were started long before. So it also starts P workers (not in burst mode), waits until
all are registered and idle, enqueues the N jobs in one transaction, whose commit wakes
them all, and times the first claim to the last completion ("hosts already running").
In the same run, the raw baseline drains its own table with P processes that each claim
100 rows at a time (``benchmarks/jobs.py``'s raw worker). It prints the medians, each
count against one process, and headgate against raw. Two cores cannot run eight
processes in parallel: what the curve shows here is whether adding processes costs
throughput (contention in the claim), not how it scales on a fleet.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import (  # noqa: E402
    BULK,
    PG_SERVER,
    Headgate,
    Raw,
    django_env,
    instant,
    machine,
)

PG_DB = "headgate_bench_hosts"
COUNTS = (1, 2, 4, 8)


def hosts_drain(hg: Headgate, n: int, processes: int, concurrency: int) -> tuple[float, float]:
    """Jobs/s from the first spawn to the last exit, and from the first claim to the last
    completion, for ``processes`` separate worker processes."""
    hg.seed(n)
    start = time.perf_counter()
    workers = [
        hg._worker("--burst", "--concurrency", str(concurrency), "--worker-id", f"host-{i}")
        for i in range(processes)
    ]
    codes = [w.wait() for w in workers]
    elapsed = time.perf_counter() - start
    done = hg.count("completed")
    if done != n or any(codes):
        raise RuntimeError(f"{processes} hosts completed {done} of {n} (exit codes {codes})")
    first, last = hg.sql("SELECT min(claimed_at), max(finalized_at) FROM headgate_job")[0]
    return n / elapsed, n / (instant(last) - instant(first)).total_seconds()


def hosts_running(hg: Headgate, n: int, processes: int, concurrency: int) -> float:
    """Jobs/s from the first claim to the last completion of ``n`` jobs enqueued in one
    transaction while ``processes`` worker processes already run, idle: hosts as a
    deployment has them, whose start-up is behind them. Its commit wakes them all at once.
    """
    from django.db import transaction

    from headgate_django import enqueue

    hg.reset()
    hg.sql("DELETE FROM headgate_worker")
    workers = [
        hg._worker("--concurrency", str(concurrency), "--worker-id", f"host-{i}")
        for i in range(processes)
    ]
    try:
        deadline = time.monotonic() + 60
        while (
            hg.scalar("SELECT count(*) FROM headgate_worker WHERE stopped_at IS NULL") < processes
        ):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"{processes} workers did not all start; see {hg.logdir}")
            time.sleep(0.05)
        time.sleep(0.5)  # past registration to the idle wait, where the wake-up finds them
        with transaction.atomic():
            for done in range(0, n, BULK):
                enqueue([hg.noop.envelope() for _ in range(min(BULK, n - done))])
        hg._wait_completed(n, 120)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=60) for w in workers]
    if any(codes):
        raise RuntimeError(f"{processes} running hosts exited with {codes}; see {hg.logdir}")
    first, last = hg.sql("SELECT min(claimed_at), max(finalized_at) FROM headgate_job")[0]
    return n / (instant(last) - instant(first)).total_seconds()


def child(url: str, jobs: int, reps: int, concurrency: int, out: Path) -> None:
    import django

    django.setup()
    logdir = Path(tempfile.mkdtemp(prefix="headgate-bench-hosts-"))
    hg = Headgate(url, logdir)
    raw = Raw("postgresql", url)
    runs: dict[str, list[float]] = {}
    for rep in range(reps):
        for p in COUNTS if rep % 2 == 0 else tuple(reversed(COUNTS)):
            rate, steady = hosts_drain(hg, jobs, p, concurrency)
            running = hosts_running(hg, jobs, p, concurrency)
            raw_rate = raw.drain(jobs, p).rate
            runs.setdefault(f"hg/{p}", []).append(rate)
            runs.setdefault(f"steady/{p}", []).append(steady)
            runs.setdefault(f"running/{p}", []).append(running)
            runs.setdefault(f"raw/{p}", []).append(raw_rate)
            print(
                f"  {p} host(s): headgate {rate:,.0f}/s (steady {steady:,.0f}/s, "
                f"already running {running:,.0f}/s), raw {raw_rate:,.0f}/s",
                file=sys.stderr,
                flush=True,
            )
    out.write_text(json.dumps({"jobs": jobs, "concurrency": concurrency, "runs": runs}))


def report(result: dict[str, Any]) -> str:
    runs = result["runs"]

    def med(key: str) -> float:
        return statistics.median(runs[key])

    lines = [
        f"### PostgreSQL: {result['jobs']:,} no-op jobs, P processes × --concurrency "
        f"{result['concurrency']}",
        "",
        "| processes | headgate, jobs/s | steady, jobs/s | vs 1 process | hosts already "
        "running, jobs/s | vs 1 process | raw claim-100, jobs/s | headgate/raw |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in COUNTS:
        lines.append(
            f"| {p} | {med(f'hg/{p}'):,.0f} | {med(f'steady/{p}'):,.0f} | "
            f"{med(f'hg/{p}') / med('hg/1'):.2f} | {med(f'running/{p}'):,.0f} | "
            f"{med(f'running/{p}') / med('running/1'):.2f} | {med(f'raw/{p}'):,.0f} | "
            f"{med(f'hg/{p}') / med(f'raw/{p}'):.2f} |"
        )
    lines += ["", f"Medians of {len(runs['hg/1'])} repetitions, counts interleaved."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.jobs, args.reps, args.concurrency, args.out)
        return
    print("\n".join(f"- {k}: {v}" for k, v in machine().items()))
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    url = f"{PG_SERVER}/{PG_DB}"
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env=django_env(url),
        cwd=ROOT,
        check=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", url, "--out", str(out)]
        cmd += ["--jobs", str(args.jobs), "--reps", str(args.reps)]
        cmd += ["--concurrency", str(args.concurrency)]
        subprocess.run(cmd, env=django_env(url), cwd=ROOT, check=True)
        print()
        print(report(json.loads(out.read_text())))


if __name__ == "__main__":
    main()

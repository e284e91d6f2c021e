#!/usr/bin/env python
"""Workflow overhead against plain jobs, and dependent-start latency, measured together.

    .venv/bin/python benchmarks/workflows.py --database sqlite|postgres|both [--quick]

For each database (a fresh SQLite file, or the PostgreSQL database ``headgate_bench_wf``
dropped and recreated) a real ``runworkers`` process (``--concurrency 10``) runs:

1. fan-out/fan-in: a 1 → 500 → 1 workflow beside 502 plain no-op jobs;
2. chain: a 100-node chain workflow beside 100 chained plain jobs (each enqueues the next);
3. dependent-start latency of ``a → b`` workflows, one at a time: b's claim minus a's
   finish, with the event-driven wake (a finishing child wakes its coordinator in the same
   transaction) and with polling alone (``WORKFLOW_EVENT_WAKE=False``, 1 s poll).

Spans are taken on the store clock from the rows themselves (first claim to last finish),
so process start-up and the script's own polling do not count. Figures are medians over
repetitions; ratios compare each workflow with its plain-job baseline from the same run.
Targets on PostgreSQL: dependent-start p50 ≤ 50 ms; the 1 → 500 → 1 workflow within 3×
the time of 502 plain jobs.
"""

from __future__ import annotations

import argparse
import os
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
from benchmarks.jobs import PG_SERVER, machine  # noqa: E402

PG_DB = "headgate_bench_wf"
SIZES = {"full": {"reps": 3, "latency": 40}, "quick": {"reps": 2, "latency": 15}}


def env_for(url: str, event_wake: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        DATABASE_URL=url,
        PYTHONPATH=str(ROOT),
        HEADGATE_BENCH_EVENT_WAKE="1" if event_wake else "0",
    )
    return env


def fresh_database(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench-wf.sqlite3'}"
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return f"{PG_SERVER}/{PG_DB}"


class Worker:
    """A real ``runworkers`` process for the duration of a ``with`` block."""

    def __init__(self, url: str, event_wake: bool = True) -> None:
        self.env = env_for(url, event_wake)

    def __enter__(self) -> Worker:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworkers", "--concurrency", "10"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


# -- the child process: Django configured for one database ------------------------------


def child(url: str, size: str) -> None:
    os.environ.update(env_for(url))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    reps = SIZES[size]["reps"]
    results: dict[str, list[float]] = {
        k: [] for k in ("plain502", "fan", "plain_chain", "wf_chain")
    }
    with Worker(url):
        for _ in range(reps):
            results["plain502"].append(plain_batch(502))
            results["fan"].append(fan_workflow(500))
            results["plain_chain"].append(plain_chain(100))
            results["wf_chain"].append(workflow_chain(100))
    latency = {}
    for wake in (True, False):
        with Worker(url, event_wake=wake):
            latency[wake] = dependent_latency(SIZES[size]["latency"])
    report(url, results, latency)


def _reset() -> None:
    from headgate_django.models import Job, WorkflowCheckpoint

    Job.objects.all().delete()
    WorkflowCheckpoint.objects.all().delete()


def _span(qs: Any) -> float:
    """First claim to last finish of ``qs``, on the store clock (seconds)."""
    from django.db.models import Max, Min

    agg = qs.aggregate(start=Min("claimed_at"), end=Max("finalized_at"))
    return (agg["end"] - agg["start"]).total_seconds()


def _wait(predicate: Any, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("benchmark workload did not finish in time")
        time.sleep(0.05)


def plain_batch(n: int) -> float:
    from benchmarks.benchapp.tasks import noop
    from headgate_django import enqueue
    from headgate_django.models import Job

    _reset()
    enqueue([noop.envelope() for _ in range(n)])
    _wait(lambda: Job.objects.filter(state="completed").count() == n)
    return _span(Job.objects.all())


def fan_workflow(width: int) -> float:
    from benchmarks.benchapp.tasks import noop
    from headgate_django import enqueue
    from headgate_django.models import Job
    from headgate_django.workflows import Workflow

    _reset()
    wf = Workflow("bench-fan").add("start", noop.envelope(), [])
    names = [f"n{i}" for i in range(width)]
    for name in names:
        wf.add(name, noop.envelope(), ["start"])
    enqueue(wf.add("end", noop.envelope(), names).prepare())
    _wait(lambda: Job.objects.filter(pk="bench-fan:coordinator", state="completed").exists())
    return _span(Job.objects.filter(workflow_id="bench-fan"))


def plain_chain(n: int) -> float:
    from benchmarks.benchapp.tasks import chain
    from headgate_django.models import Job

    _reset()
    chain.enqueue(left=n)
    _wait(lambda: Job.objects.filter(state="completed").count() == n)
    return _span(Job.objects.all())


def workflow_chain(n: int) -> float:
    from benchmarks.benchapp.tasks import noop
    from headgate_django import enqueue
    from headgate_django.models import Job
    from headgate_django.workflows import Workflow

    _reset()
    wf = Workflow("bench-chain")
    for i in range(n):
        wf.add(f"n{i}", noop.envelope(), [f"n{i - 1}"] if i else [])
    enqueue(wf.prepare())
    _wait(lambda: Job.objects.filter(pk="bench-chain:coordinator", state="completed").exists())
    return _span(Job.objects.filter(workflow_id="bench-chain"))


def dependent_latency(count: int) -> list[float]:
    """``b.claimed_at - a.finalized_at`` for ``count`` two-node workflows, one at a time."""
    from benchmarks.benchapp.tasks import noop
    from headgate_django import enqueue
    from headgate_django.models import Job
    from headgate_django.workflows import Workflow

    _reset()
    samples = []
    for i in range(count):
        wf_id = f"lat-{i}"
        enqueue(
            Workflow(wf_id).add("a", noop.envelope(), []).add("b", noop.envelope(), ["a"]).prepare()
        )
        _wait(lambda wf_id=wf_id: Job.objects.filter(pk=f"{wf_id}:b", state="completed").exists())
        a = Job.objects.get(pk=f"{wf_id}:a")
        b = Job.objects.get(pk=f"{wf_id}:b")
        samples.append((b.claimed_at - a.finalized_at).total_seconds() * 1000)
    return samples


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(url: str, results: dict[str, list[float]], latency: dict[bool, list[float]]) -> None:
    med = {k: statistics.median(v) for k, v in results.items()}
    vendor = "PostgreSQL" if url.startswith("postgres") else "SQLite"
    print(f"\n== {vendor}")
    print(f"{'workload':44} {'median s':>9} {'ratio':>7}")
    print(f"{'502 plain no-op jobs':44} {med['plain502']:9.3f}")
    fan_ratio = med["fan"] / med["plain502"]
    print(
        f"{'1 → 500 → 1 workflow':44} {med['fan']:9.3f} {fan_ratio:6.2f}×  target ≤ 3×: {'PASS' if fan_ratio <= 3 else 'MISS'}"
    )
    print(f"{'100 chained plain jobs':44} {med['plain_chain']:9.3f}")
    print(
        f"{'100-node chain workflow':44} {med['wf_chain']:9.3f} {med['wf_chain'] / med['plain_chain']:6.2f}×"
    )
    for wake, label in ((True, "event-driven wake"), (False, "polling only (1 s)")):
        p50, p99 = _pct(latency[wake], 0.5), _pct(latency[wake], 0.99)
        target = f"  target p50 ≤ 50 ms: {'PASS' if p50 <= 50 else 'MISS'}" if wake else ""
        print(f"dependent start, {label:27} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms{target}")


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

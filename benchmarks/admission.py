#!/usr/bin/env python
"""What admission control costs the claim: a drain under policies against the same drain
without any, in the same run.

    .venv/bin/python benchmarks/admission.py --database sqlite|postgres|both [--quick]

For each database (a fresh SQLite file, or the PostgreSQL database ``headgate_bench_adm``
dropped and recreated) the script drains N no-op jobs through one real
``manage.py runworkers --burst --concurrency 100``, alternating two set-ups:

- **none**: no policy at all (the plain claim, as ``benchmarks/jobs.py`` measures it);
- **policy**: the jobs spread over two queues and 50 tenants (``partition_key``), each queue
  under a concurrency ceiling of 100 per partition and fair between its tenants (deficit
  round-robin, quantum 10), the two queues weighted 3 and 1, and every job in a generous
  rate class (a million tokens a second), so every claim takes the admitted path (the
  weighted split, queue lock, running count, the round-robin over tenants, bucket refill
  and spend) without ever being held back.

It prints the medians of the drain rate from start to exit and of the steady rate (first
claim to last completion, on the store clock), and policy/none. Target on PostgreSQL:
policy/none ≥ 0.90.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import BULK, PG_SERVER, Headgate, django_env, machine  # noqa: E402

PG_DB = os.environ.get("HEADGATE_BENCH_ADM_PG_DB", "headgate_bench_adm")
SIZES = {"full": {"jobs": 20_000, "reps": 3}, "quick": {"jobs": 5_000, "reps": 2}}
QUEUES = ("adm-a", "adm-b")
TENANTS = 50
CLASS = "bench-generous"


class Policy(Headgate):
    """Seeds jobs over two queues and 50 tenants in a generous rate class."""

    def seed(self, n: int) -> None:
        from headgate_django import enqueue

        self.reset()
        for done in range(0, n, BULK):
            enqueue(
                [
                    dataclasses.replace(
                        self.noop.envelope(),
                        queue=QUEUES[i % 2],
                        partition_key=f"tenant-{i % TENANTS}",
                        rate_class=CLASS,
                    )
                    for i in range(done, min(done + BULK, n))
                ]
            )
        if self.vendor == "postgresql":
            self.sql("ANALYZE headgate_job")


def policies(on: bool) -> None:
    from headgate_django import admission

    for queue, weight in zip(QUEUES, (3, 1), strict=True):
        admission.set_concurrency_limit(queue, 100 if on else None)
        if on:
            admission.set_fairness(queue)
            admission.set_queue_weight(queue, weight)
        else:
            admission.remove_fairness(queue)
            admission.remove_queue_weight(queue)
    if on:
        admission.set_rate_class(CLASS, limit=1_000_000, window=1)
    else:
        admission.remove_rate_class(CLASS)


def child(url: str, size: str, out: Path) -> None:
    import django

    django.setup()
    sizes = SIZES[size]
    n = sizes["jobs"]
    logdir = Path(tempfile.mkdtemp(prefix="headgate-bench-adm-"))
    runs: dict[str, list[dict[str, float]]] = {"none": [], "policy": []}
    none, policy = Headgate(url, logdir), Policy(url, logdir)
    for rep in range(sizes["reps"]):
        for name, hg in (
            (("none", none), ("policy", policy))
            if rep % 2 == 0
            else (
                ("policy", policy),
                ("none", none),
            )
        ):
            policies(name == "policy")
            drain = hg.drain(n, processes=1, concurrency=100)
            runs[name].append(
                {
                    "rate": drain.rate,
                    "steady": drain.steady,
                    "cpu": drain.cpu_ms_per_1k,
                    "server": drain.server_ms_per_1k or 0.0,
                }
            )
            print(
                f"  [{hg.vendor}] {name}: {drain.rate:,.0f}/s (steady {drain.steady:,.0f}/s)",
                file=sys.stderr,
                flush=True,
            )
    policies(False)
    out.write_text(json.dumps({"vendor": none.vendor, "jobs": n, "runs": runs}))


def fresh_database(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'bench-adm.sqlite3'}"
    else:
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
    return url


def report(result: dict[str, Any]) -> str:
    runs = result["runs"]

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    lines = [
        f"### {result['vendor']}: {result['jobs']:,} no-op jobs, 1 process, --concurrency 100",
        "",
        "| drain | none, jobs/s | policy, jobs/s | policy/none | target | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    for key, label in (("rate", "start to exit"), ("steady", "steady (first claim to last)")):
        ratio = med("policy", key) / med("none", key)
        target = result["vendor"] == "postgresql" and key == "rate"
        verdict = ("PASS" if ratio >= 0.90 else "FAIL") if target else ""
        lines.append(
            f"| {label} | {med('none', key):,.0f} | {med('policy', key):,.0f} | {ratio:.2f} | "
            f"{'≥ 0.90' if target else ''} | {verdict} |"
        )
    for key, label in (("cpu", "worker CPU, ms/1k jobs"), ("server", "server CPU, ms/1k jobs")):
        if med("none", key):
            lines.append(
                f"| {label} | {med('none', key):,.0f} | {med('policy', key):,.0f} | "
                f"{med('policy', key) / med('none', key):.2f} | | |"
            )
    lines.append("")
    lines.append(f"Medians of {len(runs['none'])} interleaved repetitions each.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="postgres")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = "quick" if args.quick else "full"
    if args.child:
        child(args.child, size, args.out)
        return
    print("\n".join(f"- {k}: {v}" for k, v in machine().items()))
    kinds = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    for kind in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            url = fresh_database(kind, Path(tmp))
            out = Path(tmp) / "result.json"
            cmd = [sys.executable, __file__, "--child", url, "--out", str(out)]
            if args.quick:
                cmd.append("--quick")
            subprocess.run(cmd, env=django_env(url), cwd=ROOT, check=True)
            print()
            print(report(json.loads(out.read_text())))


if __name__ == "__main__":
    main()

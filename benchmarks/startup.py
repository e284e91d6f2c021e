#!/usr/bin/env python
"""How long a worker takes from spawn to its first claim, against a raw claimer's spawn.

    .venv/bin/python benchmarks/startup.py --database sqlite|postgres|both [--repeat 7]

In the sample project (``sampleproject.settings``, as ``make demo`` runs it), on a fresh
SQLite file or the PostgreSQL database ``headgate_bench_start`` (dropped and recreated):

- **runworkers**: one job waits in a queue of its own; ``manage.py runworkers --burst
  --queue <it> --concurrency 1`` is spawned, and the figure is the job's ``claimed_at``
  (store clock) minus the instant before the spawn;
- **raw**: the same, for a ``python -c`` process that imports only the database driver,
  connects and claims the job with one ``UPDATE … RETURNING`` (``FOR UPDATE SKIP LOCKED``
  on PostgreSQL), setting ``claimed_at`` from the same clock.

Both run on this machine and clock. It prints the medians and the ratio, and the modules a
worker imports that it should not need (DRF, drf-spectacular, Channels, igraph). Target:
runworkers ≤ 0.4 s on PostgreSQL.
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

PG_DB = os.environ.get("HEADGATE_BENCH_START_PG_DB", "headgate_bench_start")
QUEUE = "startup-bench"
#: Packages the issue says a worker must not import unless a handler does.
NOT_NEEDED = ("rest_framework", "drf_spectacular", "channels", "igraph", "daphne")

RAW_PG = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute(
    "UPDATE headgate_job SET state = 'running', lease_id = 'raw', "
    "claimed_at = clock_timestamp() WHERE id = ("
    "SELECT id FROM headgate_job WHERE state = 'available' AND queue = %s "
    "ORDER BY priority DESC, scheduled_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id",
    [sys.argv[2]],
).fetchone()
"""
RAW_SQLITE = """
import sys, sqlite3
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute(
    "UPDATE headgate_job SET state = 'running', lease_id = 'raw', "
    "claimed_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ("
    "SELECT id FROM headgate_job WHERE state = 'available' AND queue = ? "
    "ORDER BY priority DESC, scheduled_at, id LIMIT 1) RETURNING id",
    [sys.argv[2]],
).fetchall()
conn.execute("COMMIT")
"""


def env_for(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="sampleproject.settings", DATABASE_URL=url)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    for name in ("DJANGO_DEBUG", "HEADGATE_DEMO_OPERATOR"):
        env.pop(name, None)
    return env


def fresh_database(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench-start.sqlite3'}"
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {PG_DB}")
    return f"{PG_SERVER}/{PG_DB}"


def child(url: str, repeat: int) -> None:
    """Runs in the sample project's settings: seed, spawn, read the claim instants."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from dataclasses import replace

    from headgate_django import enqueue
    from headgate_django.models import Job
    from sampleproject.demo.tasks import send_welcome_email

    vendor = django.db.connection.vendor
    env = env_for(url)
    raw_target = url if vendor == "postgresql" else url.removeprefix("sqlite:///")
    runs: dict[str, list[float]] = {"runworkers": [], "raw": []}

    def spawn(name: str, argv: list[str]) -> float:
        (job_id,) = enqueue(replace(send_welcome_email.envelope(user_id=1), queue=QUEUE))
        before = time.time()
        done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"{name} exited {done.returncode}:\n{done.stderr[-2000:]}")
        claimed = Job.objects.get(pk=job_id).claimed_at
        Job.objects.filter(pk=job_id).delete()
        assert claimed is not None, f"{name} did not claim the job"
        return claimed.timestamp() - before

    manage = [sys.executable, str(ROOT / "manage.py"), "runworkers", "--burst"]
    manage += ["--queue", QUEUE, "--concurrency", "1"]
    raw = [sys.executable, "-c", RAW_PG if vendor == "postgresql" else RAW_SQLITE]
    raw += [raw_target, QUEUE]
    spawn("warm-up", manage)
    for _ in range(repeat):
        runs["runworkers"].append(spawn("runworkers", manage))
        runs["raw"].append(spawn("raw", raw))
        print(
            f"  [{vendor}] runworkers {runs['runworkers'][-1] * 1000:.0f} ms, "
            f"raw {runs['raw'][-1] * 1000:.0f} ms",
            file=sys.stderr,
            flush=True,
        )
    imported = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    report(vendor, runs, imported)


#: What a worker process has imported once it is ready to claim: the command's set-up up to
#: the point where its loop would start.
IMPORTS = """
import sys
import django
django.setup()
from django.core.management import load_command_class
command = load_command_class("headgate_django", "runworkers")
import headgate_django.worker.runner
print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def report(vendor: str, runs: dict[str, list[float]], imported: list[str]) -> None:
    hg, raw = (statistics.median(runs[k]) for k in ("runworkers", "raw"))
    target = "≤ 0.4 s" if vendor == "postgresql" else ""
    verdict = ("PASS" if hg <= 0.4 else "FAIL") if target else ""
    print(f"\n### {vendor}: spawn → first claim, medians of {len(runs['raw'])}\n")
    print("| runworkers, ms | raw claimer, ms | ratio | target | verdict |")
    print("|---:|---:|---:|---|---|")
    print(f"| {hg * 1000:.0f} | {raw * 1000:.0f} | {hg / raw:.1f} | {target} | {verdict} |")
    spread = ", ".join(f"{x * 1000:.0f}" for x in sorted(runs["runworkers"]))
    print(f"\nrunworkers runs (ms, sorted): {spread}")
    extra = [name for name in NOT_NEEDED if name in imported]
    print(f"Not needed but imported before the first claim: {', '.join(extra) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="postgres")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat)
        return
    print("\n".join(f"- {k}: {v}" for k, v in machine().items()))
    kinds = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    for kind in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            url = fresh_database(kind, Path(tmp))
            cmd = [sys.executable, __file__, "--child", url, "--repeat", str(args.repeat)]
            subprocess.run(cmd, env=env_for(url), cwd=ROOT, check=True)


if __name__ == "__main__":
    main()

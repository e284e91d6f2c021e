#!/usr/bin/env python
"""What a long durable workflow stores, and what each of its passes reads, writes and costs.

    .venv/bin/python benchmarks/durable_growth.py [--database sqlite|postgres] [--steps N]
        [--cold] [--pg-database NAME]

One workflow of N sequential no-op Operations (``bench-sequence``; 5,000 by default) runs to
its end in this process, one job at a time (``testing.run_jobs``), on a fresh database
built as ``benchmarks/durable.py`` builds it. For each job run (a workflow pass or an
Operation) it records the bytes of the parameters of every INSERT, UPDATE and DELETE, the
history events read, and the time taken; then prints them at five points of the workflow's
life, and what the execution left stored: events, their payloads' JSON bytes, the stored
result, and on PostgreSQL the history table's size on disk.

``--cold`` forgets the worker's history cache before every job, as when each pass of a
workflow lands on another worker process (or the cache, 1,024 executions, evicted it):
then every pass reads the whole history.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.durable import PG_DB, django_env, prepare  # noqa: E402

POINTS = 5  # windows reported over the workflow's life
WINDOW = 50  # job runs per window


def measure(steps: int, cold: bool) -> dict[str, Any]:
    """Run the workflow; per job run: bytes written, history events read, seconds."""
    from django.db import connection

    from headgate_django import durable, testing
    from headgate_django.durable import history_cache
    from headgate_django.models import Execution, HistoryEvent

    workflow_id = durable.Client().start("bench-sequence", "1", steps).workflow_id
    runs: list[dict[str, float]] = []
    now: dict[str, float] = {}

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            now["written"] += len(str(params))
        return execute(sql, params, many, context)

    def counting(read: Any, events: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = read(*args, **kwargs)
            if out is not None:
                now["read"] += len(events(out))
            return out

        return wrapped

    # The cache's two reads: the events after those it holds, or the whole history.
    reads = (history_cache.execution_read, history_cache.history_load)
    history_cache.execution_read = counting(reads[0], lambda out: out[1])
    history_cache.history_load = counting(reads[1], lambda out: out)
    try:
        with connection.execute_wrapper(record):
            while True:
                now = {"written": 0, "read": 0}
                if cold:
                    history_cache.histories.forget(workflow_id)
                began = time.perf_counter()
                if not testing.run_jobs(max_jobs=1).outcomes:
                    break
                now["seconds"] = time.perf_counter() - began
                runs.append(now)
    finally:
        history_cache.execution_read, history_cache.history_load = reads
    execution = Execution.objects.get(pk=workflow_id)
    payloads = HistoryEvent.objects.filter(execution_id=workflow_id).values_list(
        "payload", flat=True
    )
    stored = {
        "state": execution.state,
        "events": execution.last_seq,
        "history_bytes": execution.history_bytes,
        "payload_json_bytes": sum(len(json.dumps(p, separators=(",", ":"))) for p in payloads),
        "result_json_bytes": len(json.dumps(execution.result)),
    }
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size('headgate_durable_history')")
            stored["history_table_bytes"] = cursor.fetchone()[0]
    return {
        "vendor": connection.vendor,
        "steps": steps,
        "cold": cold,
        "stored": stored,
        "runs": runs,
    }


def table(results: dict[str, Any]) -> str:
    runs, stored = results["runs"], results["stored"]
    cache = "cold (forgotten before each job)" if results["cold"] else "warm"
    lines = [
        f"### {results['vendor']}: {results['steps']:,} sequential Operations, cache {cache}",
        "",
        "| job runs | bytes written / job | history events read / job | ms / job |",
        "|---|---:|---:|---:|",
    ]
    for point in range(POINTS):
        start = min(point * (len(runs) - WINDOW) // (POINTS - 1), len(runs) - WINDOW)
        window = runs[max(start, 0) : max(start, 0) + WINDOW]
        mean = {k: sum(r[k] for r in window) / len(window) for k in window[0]}
        lines.append(
            f"| {start:,}–{start + len(window):,} | {mean['written']:,.0f} | "
            f"{mean['read']:,.1f} | {mean['seconds'] * 1000:.2f} |"
        )
    total = sum(r["seconds"] for r in runs)
    lines += ["", f"{len(runs):,} job runs in {total:.1f} s. Stored: " + json.dumps(stored)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--cold", action="store_true", help="no history cache between passes")
    parser.add_argument("--pg-database", default=PG_DB, help="PostgreSQL database to recreate")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import django

        django.setup()
        args.out.write_text(json.dumps(measure(args.steps, args.cold)))
        return
    with tempfile.TemporaryDirectory(prefix="headgate-bench-growth-") as tmp:
        url = prepare(args.database, Path(tmp), args.pg_database)
        out = Path(tmp) / "results.json"
        cmd = [sys.executable, __file__, "--child", url, "--out", str(out)]
        cmd += ["--steps", str(args.steps)] + (["--cold"] if args.cold else [])
        subprocess.run(cmd, env=django_env(url), cwd=ROOT, check=True)
        print(table(json.loads(out.read_text())))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Headgate on a production-sized job table, against the same database empty, in one run.

    .venv/bin/python benchmarks/large_tables.py --database postgres|mysql|both
        [--terminal N] [--scheduled N] [--backlog N] [--reps N] [--quick] [--json OUT]

For each database the script builds two fresh ones (``hg_hg_tables_bench`` and
``hg_hg_tables_bench_empty`` on PostgreSQL 127.0.0.1:5432 or MariaDB 127.0.0.1:3306,
dropped and recreated), migrates them, and then:

1. on the empty table: the time of every console page and API list (median of 3
   requests, in process);
2. fills the first database's table in SQL (``benchmarks/fill.py``): ``--terminal``
   finished jobs (~200-byte payloads, ~1 KB errors on the archived 5%) and
   ``--scheduled`` future jobs; ``ANALYZE``, then lets the server settle, as it would
   have long before a production table reached that size (:func:`settle`);
3. the enqueue and drain rates, ``--reps`` times on each database in turn (empty, large,
   empty, large, …, each a process of its own), so that the machine's noise hits both
   alike: single enqueue (autocommit, one job per call), bulk enqueue (1,000 per call)
   and a drain of no-op jobs through ``runworkers --burst --no-duties``; the empty
   database's table is emptied before each of its repetitions; then the pages again on
   the large table, with ratios;
4. eviction: ``--backlog`` finished jobs already past retention, deleted by repeated
   ``job_evict_pass`` calls (the ``evict`` duty's work, default batch and budget) until
   none is left: rows/s and the clearing time; then ``--reps`` drains alone and as many
   with a quarter of that backlog evicted beside them, in turn (the drain's slowdown).

Targets (issue 32): every page/list < 200 ms; eviction ≥ 2 × the drain's completion rate;
a 1M backlog cleared in minutes; a concurrent drain ≤ 10% slower; enqueue and drain on
the large table within 10% of the empty one. The child process per database (``--child``)
keeps Django's settings per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB = "hg_hg_tables_bench"
EMPTY_DB = f"{DB}_empty"
SERVERS = {
    "postgres": "postgresql://postgres@127.0.0.1:5432/{}",
    "mysql": "mysql://root@127.0.0.1:3306/{}",
}
#: How long :func:`settle` waits at most for InnoDB's purge after the fill.
PURGE_WAIT_S = 600
PAGES = [
    ("console job list", "/admin/headgate_django/job/"),
    ("console job list, archived", "/admin/headgate_django/job/?state__exact=archived"),
    ("console queues dashboard", "/admin/headgate_django/job/queues/"),
    ("console workflow list", "/admin/headgate_django/job/workflows/"),
    ("console executions", "/admin/headgate_django/execution/"),
    ("console signals", "/admin/headgate_django/signalemission/"),
    ("GET /jobs", "/api/v1/jobs"),
    ("GET /jobs?state=archived", "/api/v1/jobs?state=archived&limit=50"),
    ("GET /jobs?state=scheduled", "/api/v1/jobs?state=scheduled&limit=50"),
    ("GET /jobs?queue=default", "/api/v1/jobs?queue=default&limit=50"),
    ("GET /jobs?kind=bench.k3", "/api/v1/jobs?kind=bench.k3&limit=50"),
    ("GET /jobs/counts", "/api/v1/jobs/counts"),
    ("GET /jobs/counts?queue=q1", "/api/v1/jobs/counts?queue=q1"),
    ("GET /queues", "/api/v1/queues"),
    ("GET /workflows", "/api/v1/workflows"),
    ("GET /durable/executions", "/api/v1/durable/executions"),
    ("GET /quarantine", "/api/v1/quarantine"),
]
PAGE_TARGET_MS = 200.0


def env_for(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="benchmarks.settings",
        PYTHONPATH=str(ROOT),
    )
    return env


def prepare(database: str, name: str) -> str:
    """A fresh, migrated database; returns its DATABASE_URL."""
    if database == "postgres":
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            c.execute(f"CREATE DATABASE {name}")
    else:
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", user="root")
        conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        conn.cursor().execute(f"CREATE DATABASE {name}")
        conn.close()
    url = SERVERS[database].format(name)
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env=env_for(url),
        cwd=ROOT,
        check=True,
    )
    return url


# -- measurements (in the child, Django set up) -----------------------------------------


def enqueue_rates(n_single: int, n_bulk: int) -> dict[str, float]:
    from benchmarks.benchapp.tasks import noop
    from headgate_django import enqueue

    start = time.perf_counter()
    for _ in range(n_single):
        noop.enqueue()
    single = n_single / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(n_bulk // 1000):
        enqueue([noop.envelope() for _ in range(1000)])
    bulk = n_bulk / (time.perf_counter() - start)
    return {"single enqueue": single, "bulk enqueue": bulk}


def drain_rate(url: str) -> float:
    """Jobs/s of one ``runworkers --burst`` over every available job (start to exit)."""
    from headgate_django.models import Job

    n = Job.objects.filter(state="available").count()
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "runworkers",
            "--burst",
            "--no-duties",
            "--concurrency",
            "10",
        ],
        env=env_for(url),
        cwd=ROOT,
        check=True,
    )
    return n / (time.perf_counter() - start)


def throughput(url: str, n_single: int, n_drain: int) -> dict[str, float]:
    rates = enqueue_rates(n_single, n_drain)
    rates["drain"] = drain_rate(url)
    return rates


def measure_apart(url: str, args: argparse.Namespace, *, fresh: bool) -> dict[str, float]:
    """:func:`throughput` in a process of its own on ``url`` (emptied first if ``fresh``)."""
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    cmd = [
        sys.executable,
        __file__,
        "--throughput",
        url,
        str(out),
        "--single",
        str(args.single),
        "--drain",
        str(args.drain),
        *(["--fresh"] if fresh else []),
    ]
    subprocess.run(cmd, env=env_for(url), cwd=ROOT, check=True)
    rates: dict[str, float] = json.loads(out.read_text())
    out.unlink()
    return rates


def run_throughput(url: str, args: argparse.Namespace, out: Path) -> None:
    """The ``--throughput`` child: one repetition of the rates on ``url``."""
    import django

    os.environ.update(env_for(url))
    django.setup()
    from django.db import connection

    if args.fresh:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM headgate_job")
    out.write_text(json.dumps(throughput(url, args.single, args.drain)))


def interleaved(empty_url: str, large_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--reps`` repetitions of the rates on each database, alternating."""
    runs: dict[str, list[dict[str, float]]] = {"empty": [], "large": []}
    for _ in range(args.reps):
        runs["empty"].append(measure_apart(empty_url, args, fresh=True))
        runs["large"].append(measure_apart(large_url, args, fresh=False))
    return runs


def page_times() -> dict[str, float]:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "pw"
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    times = {}
    for name, path in PAGES:
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            response = client.get(path)
            samples.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        times[name] = statistics.median(samples)
    return times


def fill_table(vendor: str, terminal: int, scheduled: int, expired: int = 0) -> float:
    from django.db import connection

    from benchmarks.fill import analyze, fill

    start = time.perf_counter()
    with connection.cursor() as cursor:
        fill(cursor, vendor, terminal=terminal, scheduled=scheduled, expired=expired)
        analyze(cursor, vendor)
        settle(cursor, vendor)
    return time.perf_counter() - start


def settle(cursor: Any, vendor: str) -> None:
    """Write the fill's pages out and let the server finish its own work on them.

    A fill writes gigabytes in minutes; a production table grew to that size over weeks,
    and its server flushed and purged along the way. Measured at once, the large table's
    rates would include that background work. PostgreSQL: a ``CHECKPOINT``. MariaDB:
    ``FLUSH TABLES … FOR EXPORT`` writes the table's dirty pages, then the purge of the
    fill's undo log is awaited (InnoDB's history list back under 1,000 entries).
    """
    if vendor == "postgresql":
        cursor.execute("CHECKPOINT")
        return
    cursor.execute("FLUSH TABLES headgate_job FOR EXPORT")
    cursor.execute("UNLOCK TABLES")
    deadline = time.monotonic() + PURGE_WAIT_S
    while time.monotonic() < deadline:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'")
        if int(cursor.fetchone()[1]) < 1000:
            return
        time.sleep(1)


def table_sizes(vendor: str) -> dict[str, float]:
    """Data and index megabytes of ``headgate_job``."""
    from django.db import connection

    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("SELECT pg_table_size('headgate_job'), pg_indexes_size('headgate_job')")
        else:
            cursor.execute(
                "SELECT DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'headgate_job'"
            )
        data, index = cursor.fetchone()
    return {"data MB": data / 2**20, "index MB": index / 2**20}


def evict_all() -> tuple[int, float]:
    """Rows evicted and seconds taken by eviction passes until nothing is expired."""
    from headgate_django import store
    from headgate_django.conf import headgate_settings as s

    rows, start = 0, time.perf_counter()
    while True:
        report = store.job_evict_pass(batch=s.EVICT_BATCH, budget=s.EVICT_BUDGET.total_seconds())
        rows += report.rows
        if not report.more:
            return rows, time.perf_counter() - start


def beside_eviction(url: str, vendor: str, n_drain: int, backlog: int, reps: int) -> dict[str, Any]:
    """Drains alone and drains with eviction of ``backlog`` expired rows beside them, in turn.

    Before each drain the server settles (after :func:`settle`, and on PostgreSQL a
    ``VACUUM``, as autovacuum would have run after the last mass delete), so that both
    kinds of drain start from the same state and the one with eviction pays for its own
    deletes, the purge or vacuum behind them included, and for nothing earlier.
    """
    from django.db import connection

    from benchmarks.benchapp.tasks import noop
    from benchmarks.fill import fill
    from headgate_django import enqueue

    def ready(expired: int) -> None:
        with connection.cursor() as cursor:
            if expired:
                fill(cursor, vendor, terminal=0, expired=expired)
            if vendor == "postgresql":
                cursor.execute("VACUUM headgate_job")
            settle(cursor, vendor)
        for _ in range(n_drain // 1000):
            enqueue([noop.envelope() for _ in range(1000)])

    runs: dict[str, list[float]] = {"alone": [], "with eviction": []}
    evicted: list[int] = []

    def evict() -> None:
        evicted.append(evict_all()[0])
        connection.close()  # this thread's own connection

    for _ in range(reps):
        ready(0)
        runs["alone"].append(drain_rate(url))
        ready(backlog)
        thread = threading.Thread(target=evict)
        thread.start()
        runs["with eviction"].append(drain_rate(url))
        thread.join()
    return {
        "runs": runs,
        "alone": statistics.median(runs["alone"]),
        "drain with eviction": statistics.median(runs["with eviction"]),
        "evicted meanwhile": statistics.median(evicted),
    }


def run_child(url: str, empty_url: str, args: argparse.Namespace, out: Path) -> None:
    import django

    os.environ.update(env_for(url))
    django.setup()
    from django.db import connection

    vendor = connection.vendor
    sizes = {
        k: getattr(args, k) for k in ("terminal", "scheduled", "backlog", "single", "drain", "reps")
    }
    result: dict[str, Any] = {"vendor": vendor, "sizes": sizes}
    result["empty pages ms"] = page_times()
    result["fill s"] = fill_table(vendor, args.terminal, args.scheduled)
    result["table"] = table_sizes(vendor)
    connection.close()
    result["runs"] = interleaved(empty_url, url, args)
    result["empty"] = _medians(result["runs"]["empty"])
    result["large"] = _medians(result["runs"]["large"])
    result["large pages ms"] = page_times()
    fill_table(vendor, 0, 0, expired=args.backlog)
    rows, seconds = evict_all()
    result["eviction"] = {"rows": rows, "seconds": seconds, "rows/s": rows / seconds}
    result["concurrent"] = beside_eviction(url, vendor, args.drain, args.backlog // 4, args.reps)
    out.write_text(json.dumps(result))


# -- report ------------------------------------------------------------------------------


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def _range(runs: list[dict[str, float]], key: str) -> str:
    return _spread([run[key] for run in runs])


def _spread(values: list[float]) -> str:
    return f"{min(values):,.0f}–{max(values):,.0f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(r: dict[str, Any]) -> str:
    lines = [
        f"## {r['vendor']}: {r['sizes']['terminal']:,} terminal + "
        f"{r['sizes']['scheduled']:,} scheduled rows (fill {r['fill s']:.0f} s; "
        f"data {r['table']['data MB']:.0f} MB, indexes {r['table']['index MB']:.0f} MB, "
        f"index/data {r['table']['index MB'] / r['table']['data MB']:.2f})",
        "",
        f"Rates: medians (min–max) of {r['sizes']['reps']} repetitions on each database, "
        "taken in turn.",
        "",
        "| jobs/s | empty | large | large/empty | target ≥ 0.90 |",
        "|---|---:|---:|---:|---|",
    ]
    for key in ("single enqueue", "bulk enqueue", "drain"):
        e, g = r["empty"][key], r["large"][key]
        lines.append(
            f"| {key} | {e:,.0f} ({_range(r['runs']['empty'], key)}) | "
            f"{g:,.0f} ({_range(r['runs']['large'], key)}) | {g / e:.2f} | "
            f"{verdict(g / e >= 0.9)} |"
        )
    lines += ["", "| page / list (ms) | empty | large | target < 200 ms |", "|---|---:|---:|---|"]
    for name, _ in PAGES:
        e, g = r["empty pages ms"][name], r["large pages ms"][name]
        lines.append(f"| {name} | {e:.0f} | {g:.0f} | {verdict(g < PAGE_TARGET_MS)} |")
    ev, drain, beside = r["eviction"], r["large"]["drain"], r["concurrent"]
    slow = 1 - beside["drain with eviction"] / beside["alone"]
    lines += [
        "",
        f"- eviction: {ev['rows']:,} expired rows in {ev['seconds']:.1f} s = "
        f"{ev['rows/s']:,.0f} rows/s, {ev['rows/s'] / drain:.1f}× the drain's "
        f"{drain:,.0f} jobs/s (target ≥ 2×: {verdict(ev['rows/s'] >= 2 * drain)}); a backlog "
        f"of 1M would clear in {1e6 / ev['rows/s'] / 60:.1f} min",
        f"- drain with eviction running: {beside['drain with eviction']:,.0f} jobs/s "
        f"({_spread(beside['runs']['with eviction'])}; {beside['evicted meanwhile']:,.0f} "
        f"rows evicted each time) against {beside['alone']:,.0f} alone "
        f"({_spread(beside['runs']['alone'])}), medians of {len(beside['runs']['alone'])} "
        f"taken in turn: {slow:+.0%} slower (target ≤ 10%: {verdict(slow <= 0.10)})",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", choices=["postgres", "mysql", "both"], default="both")
    parser.add_argument("--terminal", type=int, default=500_000)
    parser.add_argument("--scheduled", type=int, default=50_000)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3, help="repetitions of the rates on each")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, metavar=("URL", "EMPTY", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--throughput", nargs=2, metavar=("URL", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.terminal, args.scheduled, args.backlog = 50_000, 5_000, 20_000
        args.single, args.drain = 300, 3_000
    if args.throughput:
        run_throughput(args.throughput[0], args, Path(args.throughput[1]))
        return
    if args.child:
        run_child(args.child[0], args.child[1], args, Path(args.child[2]))
        return
    results = []
    for database in ("postgres", "mysql") if args.database == "both" else (args.database,):
        url = prepare(database, DB)
        empty_url = prepare(database, EMPTY_DB)
        out = (
            Path(f"/tmp/{DB}-{database}.json")
            if args.json is None
            else args.json.with_suffix(f".{database}.json")
        )
        child = [sys.executable, __file__, *sys.argv[1:], "--child", url, empty_url, str(out)]
        subprocess.run(child, env=env_for(url), cwd=ROOT, check=True)
        results.append(json.loads(out.read_text()))
        print(report(results[-1]), flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()

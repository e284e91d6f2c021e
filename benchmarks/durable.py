#!/usr/bin/env python
"""Throughput, latency and replay cost of headgate's durable (workflow-as-code) runtime.

    .venv/bin/python benchmarks/durable.py --database sqlite|postgres|both [--quick] [--json OUT]
        [--only continue-as-new] [--pg-database NAME]

For each database the script builds a fresh one (a SQLite file in a temp directory, or the
PostgreSQL database ``headgate_bench_durable`` on 127.0.0.1:5432 — or ``--pg-database`` —
dropped and recreated), migrates it, then measures (``--only continue-as-new``: only 4):

1. throughput: 1,000 workflows of 3 sequential Operations (each a no-op) started, then
   drained by ``manage.py runworkers --burst`` subprocesses, timed from worker start to
   exit, as executions/s (and starts/s for ``Client.start``);
2. sequential latency: one workflow of 100 sequential Operations beside 100 chained plain
   jobs (each enqueues the next) on the same running worker, interleaved, timed on the store
   clock from the moment the worker picked the work up (the first pass; the first job's
   claim) to the end (the execution finished; the last job finished), so an idle worker's
   first poll does not count. Target: the workflow takes at most 2× the chain;
3. replay cost against history length: one pass of a workflow whose history holds N
   completed Operations — the pure kernel replay, and a whole pass's reads from the
   database (header + history) with the history cache cold and warm;
4. continue-as-new: one workflow looping 10,000 iterations (one Operation each) that
   continues as new every 500, against the same loop run once for 500 iterations without
   it, on the same running worker, timed on the store clock like (2). Target: the long
   loop costs at most 1.2× twenty of the short one — each run replays only its own
   history, so the cost stays linear in the iterations. Every run's history must stay
   under the history-size warning threshold.

The process for each database is a child of this one (``--child``), because Django's
settings are per process. Figures are medians (min–max) over repetitions.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import PG_SERVER, machine  # noqa: E402

PG_DB = "headgate_bench_durable"
SIZES = {
    "full": {
        "workflows": 1000,
        "reps": 3,
        "chain": 100,
        "chain_reps": 5,
        "pass_reps": 20,
        "loop_reps": 3,
    },
    "quick": {
        "workflows": 300,
        "reps": 2,
        "chain": 100,
        "chain_reps": 3,
        "pass_reps": 5,
        "loop_reps": 1,
    },
}
DRAINS = ((1, 10), (2, 10))  # (processes, --concurrency)
HISTORY_LENGTHS = (10, 100, 1000)
RATIO_TARGET = 2.0
LOOP = {"total": 10_000, "every": 500}
LOOP_TARGET = 1.2


def django_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.durable_settings"
    env["DATABASE_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


# ---------------------------------------------------------------------------------------
# The child: Django set up against one fresh database.
# ---------------------------------------------------------------------------------------


class Bench:
    def __init__(self, url: str, logdir: Path) -> None:
        from django.db import connection

        self.url = url
        self.env = django_env(url)
        self.vendor = connection.vendor
        self.logdir = logdir
        self._logs = 0

    def reset(self) -> None:
        from headgate_django.models import (
            Execution,
            ExecutionRun,
            HistoryEvent,
            Job,
            RunHistoryEvent,
            SignalInbox,
        )

        for model in (RunHistoryEvent, ExecutionRun, HistoryEvent, SignalInbox, Execution, Job):
            model.objects.all().delete()

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        self._logs += 1
        log = open(self.logdir / f"worker-{self._logs}.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, str(ROOT / "manage.py"), "runworkers", *args]
        return subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=log, stderr=log)

    def throughput(self, n: int, processes: int, concurrency: int) -> tuple[float, float]:
        """(starts/s, executions/s) for ``n`` workflows of 3 sequential Operations."""
        from headgate_django import durable
        from headgate_django.models import Execution

        self.reset()
        client = durable.Client()
        started = time.perf_counter()
        for _ in range(n):
            client.start("bench-sequence", "1", 3)
        starts = n / (time.perf_counter() - started)
        args = ["--burst", "--concurrency", str(concurrency)]
        begin = time.perf_counter()
        procs = [self.worker(*args) for _ in range(processes)]
        codes = [p.wait() for p in procs]
        elapsed = time.perf_counter() - begin
        done = Execution.objects.filter(state="succeeded").count()
        if done != n or any(codes):
            raise RuntimeError(
                f"{done} of {n} executions succeeded (exit codes {codes}); {self.logdir}"
            )
        return starts, n / elapsed

    def sequential(self, count: int, reps: int) -> dict[str, list[float]]:
        """Seconds on the store clock for ``count`` chained jobs and a workflow of ``count``
        sequential Operations, run alternately on one running worker."""
        self.reset()
        worker = self.worker("--concurrency", "10")
        out: dict[str, list[float]] = {"chain": [], "durable": []}
        try:
            self._chain(3)  # warm-up: the worker is ready once it is done
            self._durable(3)
            for _ in range(reps):
                out["chain"].append(self._chain(count))
                out["durable"].append(self._durable(count))
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        return out

    def _chain(self, count: int) -> float:
        from benchmarks.durableapp.tasks import chain
        from headgate_django.models import Job

        first_id = chain.enqueue(count)
        first = self._wait(lambda: Job.objects.filter(pk=first_id).exclude(claimed_at=None).first())
        last = self._wait(
            lambda: (
                Job.objects.filter(kind="bench.durable-chain", result=1, state="completed")
                .exclude(enqueued_at__lt=first.enqueued_at)
                .first()
            )
        )
        return (last.finalized_at - first.claimed_at).total_seconds()

    def _durable(self, count: int) -> float:
        from headgate_django import durable
        from headgate_django.models import Execution, HistoryEvent

        wf = durable.Client().start("bench-sequence", "1", count).workflow_id
        row = self._wait(lambda: Execution.objects.filter(pk=wf, state="succeeded").first())
        first_pass = HistoryEvent.objects.get(execution_id=wf, seq=2).at  # the pass's clock
        return (row.finished_at - first_pass).total_seconds()

    def continue_as_new(self, reps: int) -> dict[str, Any]:
        """Seconds on the store clock for the 10,000-iteration loop that continues as new
        every 500, and for one 500-iteration run of the same loop; the largest run's
        history, and whether any run warned about its size."""
        from headgate_django.conf import headgate_settings
        from headgate_django.models import Execution, ExecutionRun

        self.reset()
        worker = self.worker("--concurrency", "10")
        out: dict[str, Any] = {"loop": [], "single": [], "largest_run": 0, "warned": False}
        try:
            self._loop(LOOP["every"], LOOP["every"] + 1)  # warm-up
            for _ in range(reps):
                out["single"].append(self._loop(LOOP["every"], LOOP["every"] + 1))
                out["loop"].append(self._loop(LOOP["total"], LOOP["every"]))
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        sizes = [*ExecutionRun.objects.values_list("events", flat=True)]
        sizes += Execution.objects.values_list("last_seq", flat=True)
        out["largest_run"] = max(sizes)
        out["threshold"] = headgate_settings.DURABLE_HISTORY_WARN_EVENTS
        out["warned"] = Execution.objects.exclude(history_warning="").exists()
        return out

    def _loop(self, total: int, every: int) -> float:
        from headgate_django import durable
        from headgate_django.models import Execution, HistoryEvent, RunHistoryEvent

        state = {"i": 0, "total": total, "every": every}
        wf = durable.Client().start("bench-loop", "1", state).workflow_id
        row = self._wait(lambda: Execution.objects.filter(pk=wf, state="succeeded").first())
        if row.run_number == 1:
            first_pass = HistoryEvent.objects.get(execution_id=wf, seq=2).at
        else:
            first = RunHistoryEvent.objects.filter(run__execution_id=wf, run__number=1)
            first_pass = first.get(seq=2).at
        return (row.finished_at - first_pass).total_seconds()

    @staticmethod
    def _wait(find: Any, timeout: float = 300) -> Any:
        deadline = time.monotonic() + timeout
        while (found := find()) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for the run to finish")
            time.sleep(0.02)
        return found

    def replay_cost(self, length: int, reps: int) -> dict[str, float]:
        """Milliseconds for one pass over a history of ``length`` completed Operations."""
        from benchmarks.durableapp.tasks import sequence
        from headgate_django import durable
        from headgate_django.durable.history_cache import HistoryCache
        from headgate_django.kernel.replay import replay
        from headgate_django.store.durable_history import NewEvent, history_append

        self.reset()
        wf = durable.Client().start("bench-sequence", "1", length + 1).workflow_id
        seq = 1
        for start in range(0, length, 250):
            events = []
            for n in range(start, min(length, start + 250)):
                cid = f"op:{n + 1}"
                events.append(NewEvent("OperationScheduled", _scheduled(wf, cid, n)))
                events.append(NewEvent("OperationCompleted", {"command_id": cid, "result": n}))
            seq = history_append(wf, expected_seq=seq, events=events)
        read = HistoryCache().read(wf)
        assert read is not None
        header, history = read
        kernel, cold, warm = [], [], []
        cache = HistoryCache()
        cache.read(wf)
        for _ in range(reps):
            t0 = time.perf_counter()
            outcome = replay(sequence.fn, header.input, history, workflow_id=wf)
            kernel.append(time.perf_counter() - t0)
            assert not outcome.commands or len(outcome.commands) == 1  # parks on the next one
            t0 = time.perf_counter()
            HistoryCache().read(wf)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            cache.read(wf)
            warm.append(time.perf_counter() - t0)
        return {
            "events": len(history),
            "kernel_ms": statistics.median(kernel) * 1000,
            "read_cold_ms": statistics.median(cold) * 1000,
            "read_warm_ms": statistics.median(warm) * 1000,
        }


def _scheduled(wf: str, cid: str, n: int) -> dict[str, Any]:
    return {
        "command_id": cid,
        "name": "bench-noop",
        "version": "1",
        "input": n,
        "execution_key": f"{wf}:{cid}",
    }


def run_child(url: str, size: str, out_path: Path, only: str | None) -> None:
    import django

    django.setup()
    from django.db import connection

    sizes = SIZES[size]
    logdir = Path(tempfile.mkdtemp(prefix="headgate-bench-durable-logs-"))
    bench = Bench(url, logdir)
    with connection.cursor() as cursor:
        if bench.vendor == "postgresql":
            cursor.execute("SHOW server_version")
            version = f"PostgreSQL {cursor.fetchone()[0]}"
        else:
            import sqlite3

            version = f"SQLite {sqlite3.sqlite_version}"
    results: dict[str, Any] = {"vendor": bench.vendor, "version": version, "sizes": sizes}
    if only is None:
        measure_runtime(bench, sizes, results)
    print(f"  [{bench.vendor}] continue-as-new: 10,000 iterations vs 500", file=sys.stderr)
    results["continue_as_new"] = bench.continue_as_new(sizes["loop_reps"])
    out_path.write_text(json.dumps(results))


def measure_runtime(bench: Bench, sizes: dict[str, int], results: dict[str, Any]) -> None:
    """Measurements 1–3: throughput, sequential latency, replay cost."""
    n = sizes["workflows"]
    for processes, concurrency in DRAINS:
        key = f"p{processes}c{concurrency}"
        print(f"  [{bench.vendor}] {n} workflows x 3 Operations, {key}", file=sys.stderr)
        for _ in range(sizes["reps"]):
            starts, rate = bench.throughput(n, processes, concurrency)
            results.setdefault("starts", []).append(starts)
            results.setdefault(f"throughput/{key}", []).append(rate)
    print(f"  [{bench.vendor}] 100 sequential: chain vs workflow", file=sys.stderr)
    results["sequential"] = bench.sequential(sizes["chain"], sizes["chain_reps"])
    print(f"  [{bench.vendor}] replay cost", file=sys.stderr)
    results["replay"] = [bench.replay_cost(n, sizes["pass_reps"]) for n in HISTORY_LENGTHS]


# ---------------------------------------------------------------------------------------
# The parent: fresh databases, tables.
# ---------------------------------------------------------------------------------------


def prepare(database: str, tmp: Path, pg_db: str = PG_DB) -> str:
    if database == "postgres":
        import psycopg

        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {pg_db} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {pg_db}")
        url = f"{PG_SERVER}/{pg_db}"
    else:
        url = f"sqlite:///{tmp / 'headgate.sqlite3'}"
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env=django_env(url),
        cwd=ROOT,
        check=True,
    )
    return url


def cell(values: list[float], fmt: str = "{:,.0f}") -> str:
    mid = fmt.format(statistics.median(values))
    if len(values) == 1:
        return mid
    return f"{mid} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def table(results: dict[str, Any]) -> str:
    sizes = results["sizes"]
    if "starts" not in results:  # --only continue-as-new
        return "\n".join([f"### {results['version']}", "", *loop_table(results["continue_as_new"])])
    lines = [f"### {results['version']}", "", "| workload | result |", "|---|---:|"]
    lines.append(f"| `Client.start`, executions/s | {cell(results['starts'])} |")
    for processes, concurrency in DRAINS:
        key = f"throughput/p{processes}c{concurrency}"
        lines.append(
            f"| {sizes['workflows']:,} workflows × 3 Operations, {processes} proc, "
            f"--concurrency {concurrency}, executions/s | {cell(results[key])} |"
        )
    seq = results["sequential"]
    chain, wf = statistics.median(seq["chain"]), statistics.median(seq["durable"])
    verdict = "PASS" if wf / chain <= RATIO_TARGET else "MISS"
    lines += [
        f"| {sizes['chain']} chained plain jobs, s | {cell(seq['chain'], '{:.2f}')} |",
        f"| 1 workflow of {sizes['chain']} sequential Operations, s | "
        f"{cell(seq['durable'], '{:.2f}')} |",
        f"| workflow / chain (target ≤ {RATIO_TARGET:g}) | {wf / chain:.2f} {verdict} |",
        "",
        "| history (events) | kernel replay, ms | pass reads, cold cache, ms | "
        "pass reads, warm cache, ms |",
        "|---:|---:|---:|---:|",
    ]
    for row in results["replay"]:
        lines.append(
            f"| {row['events']:,} | {row['kernel_ms']:.2f} | {row['read_cold_ms']:.2f} | "
            f"{row['read_warm_ms']:.2f} |"
        )
    return "\n".join([*lines, "", *loop_table(results["continue_as_new"])])


def loop_table(can: dict[str, Any]) -> list[str]:
    runs = LOOP["total"] // LOOP["every"]
    loop, single = statistics.median(can["loop"]), statistics.median(can["single"])
    ratio = loop / (runs * single)
    verdict = "PASS" if ratio <= LOOP_TARGET else "MISS"
    under = can["largest_run"] <= can["threshold"] and not can["warned"]
    return [
        "| continue-as-new | result |",
        "|---|---:|",
        f"| {LOOP['every']} iterations, one run, s | {cell(can['single'], '{:.2f}')} |",
        f"| {LOOP['total']:,} iterations, continue-as-new every {LOOP['every']} "
        f"({runs} runs), s | {cell(can['loop'], '{:.2f}')} |",
        f"| {LOOP['total']:,} iterations / ({runs} × {LOOP['every']}) "
        f"(target ≤ {LOOP_TARGET:g}) | {ratio:.2f} {verdict} |",
        f"| largest run's history, events (warning threshold {can['threshold']:,}) | "
        f"{can['largest_run']:,} {'under, no warning' if under else 'OVER'} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="300 workflows, fewer repetitions")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--only", choices=["continue-as-new"], help="run one measurement")
    parser.add_argument("--pg-database", default=PG_DB, help="PostgreSQL database to recreate")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = "quick" if args.quick else "full"
    if args.child:
        run_child(args.child, size, args.out, args.only)
        return
    facts = machine()
    print("## Machine\n")
    for key in ("cpu", "cores", "os", "python", "django", "driver", "load"):
        print(f"- {key}: {facts[key]}")
    databases = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    everything: dict[str, Any] = {"machine": facts, "size": size, "databases": {}}
    for database in databases:
        with tempfile.TemporaryDirectory(prefix="headgate-bench-durable-") as tmp:
            url = prepare(database, Path(tmp), args.pg_database)
            out = Path(tmp) / "results.json"
            cmd = [sys.executable, __file__, "--child", url, "--out", str(out)]
            if args.quick:
                cmd.append("--quick")
            if args.only:
                cmd += ["--only", args.only]
            subprocess.run(cmd, env=django_env(url), cwd=ROOT, check=True)
            results = json.loads(out.read_text())
        everything["databases"][results["vendor"]] = results
    for results in everything["databases"].values():
        print()
        print(table(results))
    if args.json:
        args.json.write_text(json.dumps(everything, indent=2))


if __name__ == "__main__":
    main()

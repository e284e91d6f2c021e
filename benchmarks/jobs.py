#!/usr/bin/env python
"""Throughput and latency of headgate's job queue, against a raw-SQL baseline run alongside.

    .venv/bin/python benchmarks/jobs.py --database sqlite|postgres|mariadb|both|all
        [--quick] [--only enqueue|drain|latency] [--defaults] [--json OUT]

For each database the script builds a fresh one (a SQLite file in a temp directory, or the
PostgreSQL database ``headgate_bench`` on 127.0.0.1:5432, or the MariaDB database
``headgate_bench`` on 127.0.0.1:3306, dropped and recreated; ``HEADGATE_BENCH_PG_DB`` and
``HEADGATE_BENCH_MYSQL_DB`` name others), migrates it with ``manage.py migrate``, then
measures (after compiling the checkout's packages to bytecode, as installing a wheel does;
on MariaDB the enqueue section only, because the raw claim has no MariaDB form:
MariaDB's ``UPDATE`` has no ``RETURNING``):

1. enqueue: one ``noop.enqueue()`` per transaction (autocommit), in blocks of 50 calls
   that alternate with the raw insert's, and ``enqueue()`` of a list of 1,000 envelopes
   built in the timed region (``noop.envelope()`` each); on PostgreSQL the single enqueue
   runs twice per repetition, once as the scheduler
   places the processes and once with this process and its two database backends held on
   separate cores (see :func:`cores_apart`);
2. drain: N no-op jobs through one real ``manage.py runworkers --burst`` command, timed
   from start to exit, with ``--processes`` 1 and 2 (the product's way to run two worker
   processes: one set-up, then two forked children) and ``--concurrency`` 10 and 100;
3. latency: enqueue → handler start while a producer enqueues one job every 10 ms against
   a running (not burst) worker, and where that time went (producer → ``enqueued_at`` →
   ``claimed_at`` → handler start, the median of each leg);
4. the same workloads through raw psycopg / sqlite3 / mysqlclient on a minimal table of the
   script's own (``bench_raw_job``): an autocommit INSERT per job; 1,000 rows in one
   transaction, each row built in the timed region as headgate's envelopes are (a fresh
   id from a counter, the kind, the payload), and sent as each database takes them
   fastest: ``executemany`` on PostgreSQL (psycopg pipelines it), one multi-row
   ``INSERT … VALUES`` on SQLite (``executemany`` ran at two thirds of its speed) and on
   MariaDB (mysqlclient's ``executemany`` rewrites the statement into one multi-row
   ``INSERT``, which the server counts as one), and the same insert into headgate's own
   job table (:meth:`Headgate.bulk_table`: what the table costs, with no headgate code);
   workers claiming 100 at a time with ``FOR UPDATE SKIP LOCKED`` and completing them
   with one fenced UPDATE (on PostgreSQL with sequential scans off for the session, see
   ``RAW_PIN_PLAN``); for latency a LISTEN/NOTIFY worker claiming one at a time (SQLite:
   a 1 ms polling loop).

Headgate's side runs with the sample project's settings (``benchmarks/settings.py``), or
with ``--defaults`` with those of a project as ``startproject`` and the README's install
leave it (``benchmarks/defaults_settings.py``: Django's plain ``DATABASES`` entry, no
``OPTIONS``, no ``HEADGATE``), which is what a user measures before tuning anything.

Headgate and raw repetitions are interleaved so machine noise hits both alike; the tables
give medians, the range over repetitions, and headgate/raw ratios. ``--only`` runs one of
the three sections (the tables then show only its rows), e.g. to repeat the latency runs
while working on the worker. The process for each database is a child of this one
(``--child``), because Django's settings are per process.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
PG_SERVER = "postgresql://postgres@127.0.0.1:5432"
PG_DB = os.environ.get("HEADGATE_BENCH_PG_DB", "headgate_bench")
MYSQL_SERVER = "mysql://root@127.0.0.1:3306"
MYSQL_DB = os.environ.get("HEADGATE_BENCH_MYSQL_DB", "headgate_bench")
PAYLOAD = b'{"args":[],"kwargs":{}}'  # what noop.envelope() stores
BULK = 1000
SINGLE_BLOCK = 50  # single enqueues per block; the two sides' blocks alternate
CLAIM = 100
CONCURRENCY = (10, 100)
PROCESSES = (1, 2)
LATENCY_INTERVAL = 0.010  # one job every 10 ms: ~100 jobs/s
SIZES = {
    # single: enqueues per repetition; bulk: batches of 1,000 per repetition;
    # drain: jobs per drain; latency: jobs per latency run.
    "full": {
        "single": 1000,
        "bulk": 5,
        "drain": 20_000,
        "latency": 2000,
        "reps": 5,
        "drain_reps": 3,
        "latency_reps": 3,
    },
    "quick": {
        "single": 300,
        "bulk": 3,
        "drain": 5_000,
        "latency": 300,
        "reps": 3,
        "drain_reps": 2,
        "latency_reps": 2,
    },
}
#: SQLite and MariaDB: bulk enqueue against their own raw multi-row insert.
OTHER_TARGETS = {"bulk": (">=", 0.80)}
TARGETS = {  # PostgreSQL: headgate / raw must be >= (throughput) or <= (latency) this
    "single": (">=", 0.80),
    "bulk": (">=", 1.0),
    "drain": (">=", 0.70),
    "p50": ("<=", 2.0),
    "p99": ("<=", 2.0),
}
#: The latency percentiles each repetition records, by name.
QUANTILES = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}
SECTIONS = ("enqueue", "drain", "latency")
#: The settings headgate's side runs with: the sample project's (``benchmarks/settings.py``),
#: or with ``--defaults`` those of a project as startproject and the README leave it
#: (``benchmarks/defaults_settings.py``). The choice reaches the children through this
#: environment variable.
TUNED_SETTINGS = "benchmarks.settings"
DEFAULT_SETTINGS = "benchmarks.defaults_settings"
SETTINGS_ENV = "HEADGATE_BENCH_SETTINGS"
#: The legs of headgate's latency, each from the previous instant (see Headgate.latency).
#: SQLite stores instants to the millisecond, so there a leg can read slightly negative.
LEGS = ("enqueued", "claimed", "started")
LEG_LABELS = (
    "producer → `enqueued_at` (the insert)",
    "`enqueued_at` → `claimed_at` (wake-up and claim)",
    "`claimed_at` → handler start (hand-over to a thread)",
)


# ---------------------------------------------------------------------------------------
# The raw baseline: a minimal table and plain driver calls, no Django.
# ---------------------------------------------------------------------------------------

PG_RAW_DDL = """
DROP TABLE IF EXISTS bench_raw_job;
CREATE TABLE bench_raw_job (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    queue text NOT NULL DEFAULT 'default',
    priority integer NOT NULL DEFAULT 0,
    payload bytea NOT NULL,
    state text NOT NULL DEFAULT 'available',
    fence bigint NOT NULL DEFAULT 0,
    lease timestamptz,
    enqueued_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bench_raw_job_claim ON bench_raw_job (priority DESC, id)
    WHERE state = 'available';
CREATE OR REPLACE FUNCTION bench_raw_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('bench_raw', NEW.queue);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER bench_raw_job_available AFTER INSERT ON bench_raw_job
    FOR EACH ROW WHEN (NEW.state = 'available') EXECUTE FUNCTION bench_raw_notify();
"""
SQLITE_RAW_DDL = """
DROP TABLE IF EXISTS bench_raw_job;
CREATE TABLE bench_raw_job (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    queue TEXT NOT NULL DEFAULT 'default',
    priority INTEGER NOT NULL DEFAULT 0,
    payload BLOB NOT NULL,
    state TEXT NOT NULL DEFAULT 'available',
    fence INTEGER NOT NULL DEFAULT 0,
    lease TEXT,
    enqueued_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX bench_raw_job_claim ON bench_raw_job (priority DESC, id)
    WHERE state = 'available';
"""
# No partial indexes on MariaDB: the claim index leads with the state instead.
MYSQL_RAW_DDL = (
    "DROP TABLE IF EXISTS bench_raw_job",
    """CREATE TABLE bench_raw_job (
        id bigint AUTO_INCREMENT PRIMARY KEY,
        kind varchar(128) NOT NULL,
        queue varchar(128) NOT NULL DEFAULT 'default',
        priority integer NOT NULL DEFAULT 0,
        payload longblob NOT NULL,
        state varchar(16) NOT NULL DEFAULT 'available',
        fence bigint NOT NULL DEFAULT 0,
        lease datetime(6),
        enqueued_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        KEY bench_raw_job_claim (state, priority DESC, id)
    ) ENGINE=InnoDB""",
)
_LEASE = {
    "postgresql": "now() + interval '30 seconds'",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '+30 seconds')",
}
_PH = {"postgresql": "%s", "sqlite": "?", "mysql": "%s"}
# The raw drain worker's session keeps the planner off sequential scans, as headgate's
# claim function does for its own statements. The table is analyzed while every job is
# available, so the planner expects no row to match ``state = 'running'``; for the fenced
# complete it then weighs a sequential scan of the whole table (filtering for running
# rows) against a primary-key probe per completed job, two costs within 1% of each other.
# Which one wins turned on the table's size: the scan took 4.7-7.4 ms a batch of 100 where
# the probes took under 1 ms, and a one-process raw drain ran at a third of its speed.
RAW_PIN_PLAN = "SET enable_seqscan = off"


def raw_claim_sql(vendor: str, limit: int, columns: str = "id, fence") -> str:
    lock = " FOR UPDATE SKIP LOCKED" if vendor == "postgresql" else ""
    return (
        f"UPDATE bench_raw_job SET state = 'running', lease = {_LEASE[vendor]}, "
        "fence = fence + 1 WHERE id IN (SELECT id FROM bench_raw_job "
        f"WHERE state = 'available' ORDER BY priority DESC, id LIMIT {limit}{lock}) "
        f"RETURNING {columns}"
    )


def raw_complete_sql(vendor: str, n: int) -> str:
    ph = _PH[vendor]
    rows = ", ".join([f"({ph}, {ph})"] * n)
    return (
        "UPDATE bench_raw_job SET state = 'completed', lease = NULL "
        f"WHERE (id, fence) IN (VALUES {rows}) AND state = 'running'"
    )


def raw_insert_sql(vendor: str) -> str:
    ph = _PH[vendor]
    return f"INSERT INTO bench_raw_job (kind, payload) VALUES ({ph}, {ph})"


def raw_bulk_sql(vendor: str, n: int) -> str:
    """The insert of ``n`` rows of ``(id, kind, payload)``: one row's text for
    ``executemany`` (PostgreSQL, MariaDB), all ``n`` rows' for SQLite."""
    ph = _PH[vendor]
    rows = 1 if vendor != "sqlite" else n
    return "INSERT INTO bench_raw_job (id, kind, payload) VALUES " + ", ".join(
        [f"({ph}, {ph}, {ph})"] * rows
    )


def table_bulk_sql(vendor: str, n: int) -> str:
    """:func:`raw_bulk_sql` for headgate's job table: a plain job's row of
    ``(id, payload, fingerprint)``, everything else written in as headgate writes it. All
    ``n`` rows but on PostgreSQL: mysqlclient rewrites ``executemany`` into one multi-row
    statement only when the row holds nothing but placeholders."""
    ph = _PH[vendor]
    now = {
        "postgresql": "clock_timestamp()",
        "mysql": "UTC_TIMESTAMP(6)",
        "sqlite": "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')",
    }[vendor]
    retention = "interval '7 days'" if vendor == "postgresql" else str(7 * 86_400 * 10**6)
    row = (
        f"({ph}, {ph}, {ph}, 'bench.noop', 'default', 0, 1, 'available', 0, 0, 25, {now}, "
        f"0, '', {now}, {retention}, '[]', '{{}}', '', 1)"
    )
    return (
        "INSERT INTO headgate_job (id, payload, fingerprint, kind, queue, priority, "
        "schema_version, state, attempt, crash_attempt, max_attempts, scheduled_at, fence, "
        "claimed_by, enqueued_at, retention, errors, checkpoint, partition_key, weight) VALUES "
        + ", ".join([row] * (1 if vendor == "postgresql" else n))
    )


def raw_connect(vendor: str, dsn: str) -> Any:
    """An autocommit connection: a lone statement is its own transaction."""
    if vendor == "postgresql":
        import psycopg

        return psycopg.connect(dsn, autocommit=True)
    if vendor == "mysql":
        import MySQLdb

        parts = urlsplit(dsn)
        return MySQLdb.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=parts.path.lstrip("/"),
            autocommit=True,
        )
    import sqlite3

    conn = sqlite3.connect(dsn, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


@contextlib.contextmanager
def raw_transaction(vendor: str, conn: Any) -> Iterator[Any]:
    if vendor == "postgresql":
        with conn.transaction(), conn.cursor() as cur:
            yield cur
        return
    cur = conn.cursor()
    cur.execute("BEGIN" if vendor == "mysql" else "BEGIN IMMEDIATE")
    try:
        yield cur
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")


def raw_drain_worker(vendor: str, dsn: str, out: Any) -> None:
    """Claim 100 at a time, complete them with one fenced UPDATE, until nothing is left.

    Sends ``(first claim, last completion)`` instants (``time.time()``) to ``out``.
    """
    conn = raw_connect(vendor, dsn)
    claim = raw_claim_sql(vendor, CLAIM)
    complete: dict[int, str] = {}
    cur = conn.cursor()
    if vendor == "postgresql":
        cur.execute(RAW_PIN_PLAN)
    first = time.time()
    while True:
        cur.execute(claim)
        rows = cur.fetchall()
        if not rows:
            break
        sql = complete.get(len(rows)) or complete.setdefault(
            len(rows), raw_complete_sql(vendor, len(rows))
        )
        cur.execute(sql, [v for row in rows for v in row])
    out.put((first, time.time()))
    conn.close()


def raw_latency_worker(vendor: str, dsn: str, expected: int, ready: Any, out: Any) -> None:
    """Claim one at a time; wake on NOTIFY (PostgreSQL) or poll every 1 ms (SQLite).

    Sends ``[(t0, t_start), ...]`` to ``out`` once ``expected`` jobs have started.
    """
    conn = raw_connect(vendor, dsn)
    listen = None
    if vendor == "postgresql":
        listen = raw_connect(vendor, dsn)
        listen.execute("LISTEN bench_raw")
    claim = raw_claim_sql(vendor, 1, "id, fence, payload")
    complete = raw_complete_sql(vendor, 1)
    cur = conn.cursor()
    stamps: list[tuple[float, float]] = []
    ready.set()
    while len(stamps) < expected:
        cur.execute(claim)
        row = cur.fetchone()
        if row is None:
            if listen is not None:
                for _ in listen.notifies(timeout=1.0, stop_after=1):
                    pass
            else:
                time.sleep(0.001)
            continue
        started = time.time()
        job_id, fence, payload = row
        stamps.append((float(bytes(payload)), started))
        cur.execute(complete, [job_id, fence])
    out.put(stamps)
    conn.close()
    if listen is not None:
        listen.close()


@dataclass(frozen=True)
class Drain:
    rate: float  # jobs/s from process start to exit
    steady: float  # jobs/s from the first claim to the last completion
    cpu_ms_per_1k: float  # worker processes' CPU (user + system) per 1,000 jobs
    server_ms_per_1k: float | None  # PostgreSQL backends' CPU per 1,000 jobs
    commits_per_1k: float | None  # PostgreSQL transactions committed per 1,000 jobs


def pg_commits(execute: Callable[[str], Any], vendor: str) -> int | None:
    """Transactions committed in this database so far (PostgreSQL's statistics)."""
    if vendor != "postgresql":
        return None
    time.sleep(0.5)  # exited backends flush their statistics as they go
    return int(
        execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    )


@overload
def per_1k(seconds: float, n: int) -> float: ...
@overload
def per_1k(seconds: float | None, n: int) -> float | None: ...
def per_1k(seconds: float | None, n: int) -> float | None:
    """Seconds spent on ``n`` jobs → milliseconds per 1,000 jobs (``None`` when unknown)."""
    return None if seconds is None else seconds * 1e6 / n


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class ServerCpu:
    """CPU used by the PostgreSQL backends serving ``PG_DB``, read from /proc.

    Works when the server runs on this machine and /proc is readable (else ``None``). A
    thread samples every 50 ms so backends that exit (a worker's connections) still count
    up to their last sample; processes that are not PostgreSQL are remembered and skipped,
    which keeps a sample well under a millisecond of CPU.
    """

    def __init__(self, vendor: str) -> None:
        self.enabled = vendor == "postgresql" and Path("/proc/self/stat").exists()
        self._ticks: dict[int, int] = {}
        self._base: dict[int, int] = {}
        self._others: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, int]:
        found = {}
        title_mark = f" {PG_DB} ".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit() or name in self._others:
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    title = f.read()
                if not title.startswith(b"postgres"):  # a backend retitles itself later
                    if b"postgres" not in title:
                        self._others.add(name)
                    continue
                if title_mark not in title:
                    continue
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                found[int(name)] = int(fields[11]) + int(fields[12])  # utime + stime
            except (OSError, IndexError, ValueError):
                continue
        return found

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._ticks.update(self._sample())

    def __enter__(self) -> ServerCpu:
        if self.enabled:
            self._base = self._sample()
            self._ticks = dict(self._base)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self._ticks.update(self._sample())

    def seconds(self) -> float | None:
        if not self.enabled:
            return None
        ticks = sum(t - self._base.get(pid, 0) for pid, t in self._ticks.items())
        return ticks / os.sysconf("SC_CLK_TCK")


class Raw:
    """The baseline's measurements, run in the benchmark's own process."""

    def __init__(self, vendor: str, dsn: str) -> None:
        self.vendor = vendor
        self.dsn = dsn
        self.conn = raw_connect(vendor, dsn)
        if vendor == "postgresql":
            self.conn.execute(PG_RAW_DDL)
        elif vendor == "mysql":
            cur = self.conn.cursor()
            for statement in MYSQL_RAW_DDL:
                cur.execute(statement)
        else:
            self.conn.executescript(SQLITE_RAW_DDL)

    def reset(self) -> None:
        if self.vendor == "postgresql":
            self.conn.execute("TRUNCATE bench_raw_job RESTART IDENTITY")
        elif self.vendor == "mysql":
            self.conn.cursor().execute("TRUNCATE bench_raw_job")
        else:
            self.conn.execute("DELETE FROM bench_raw_job")

    def scalar(self, query: str) -> Any:
        cur = self.conn.cursor()
        cur.execute(query)
        return cur.fetchone()[0]

    def count(self, state: str) -> int:
        ph = _PH[self.vendor]
        cur = self.conn.cursor()
        cur.execute(f"SELECT count(*) FROM bench_raw_job WHERE state = {ph}", [state])
        return int(cur.fetchone()[0])

    def backend_pid(self) -> int:
        """The PostgreSQL backend serving this connection."""
        return int(self.conn.info.backend_pid)

    def single(self, n: int) -> float:
        """Seconds for ``n`` autocommit inserts (see :func:`single_runs`)."""
        sql, cur = raw_insert_sql(self.vendor), self.conn.cursor()
        start = time.perf_counter()
        for _ in range(n):
            cur.execute(sql, ["bench.noop", PAYLOAD])
        return time.perf_counter() - start

    def bulk(self, batches: int) -> float:
        """Jobs/s of ``batches`` inserts of :data:`BULK` rows, each built in the timed
        region, as headgate's side builds its envelopes in its own."""
        self.reset()
        ids = itertools.count(1)
        sql = raw_bulk_sql(self.vendor, BULK)
        self._bulk(sql, ids)  # warm-up
        start = time.perf_counter()
        for _ in range(batches):
            self._bulk(sql, ids)
        return batches * BULK / (time.perf_counter() - start)

    def _bulk(self, sql: str, ids: Iterator[int]) -> None:
        with raw_transaction(self.vendor, self.conn) as cur:
            if self.vendor == "sqlite":
                params: list[Any] = []
                for _ in range(BULK):
                    params += (next(ids), "bench.noop", PAYLOAD)
                cur.execute(sql, params)
            else:
                cur.executemany(sql, [(next(ids), "bench.noop", PAYLOAD) for _ in range(BULK)])

    def _insert_many(self, rows: list[tuple[str, bytes]]) -> None:
        with raw_transaction(self.vendor, self.conn) as cur:
            cur.executemany(raw_insert_sql(self.vendor), rows)

    def seed(self, n: int) -> None:
        self.reset()
        rows = [("bench.noop", PAYLOAD)] * BULK
        for done in range(0, n, BULK):
            self._insert_many(rows[: min(BULK, n - done)])
        if self.vendor == "postgresql":
            self.conn.execute("ANALYZE bench_raw_job")

    def drain(self, n: int, processes: int) -> Drain:
        self.seed(n)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [
            ctx.Process(target=raw_drain_worker, args=(self.vendor, self.dsn, out))
            for _ in range(processes)
        ]
        commits = pg_commits(self.scalar, self.vendor)
        cpu = children_cpu()
        with ServerCpu(self.vendor) as server:
            start = time.perf_counter()
            for p in procs:
                p.start()
            spans = [out.get(timeout=600) for _ in procs]
            for p in procs:
                p.join()
            elapsed = time.perf_counter() - start
        cpu = children_cpu() - cpu
        done = self.count("completed")
        if done != n or any(p.exitcode for p in procs):
            raise RuntimeError(f"raw drain completed {done} of {n} jobs")
        busy = max(end for _, end in spans) - min(first for first, _ in spans)
        after = pg_commits(self.scalar, self.vendor)
        return Drain(
            n / elapsed,
            n / busy,
            per_1k(cpu, n),
            per_1k(server.seconds(), n),
            None if commits is None or after is None else (after - commits) * 1000 / n,
        )

    def latency(self, n: int) -> list[float]:
        self.reset()
        ctx = mp.get_context("spawn")
        ready, out = ctx.Event(), ctx.Queue()
        worker = ctx.Process(
            target=raw_latency_worker, args=(self.vendor, self.dsn, n + 1, ready, out)
        )
        worker.start()
        if not ready.wait(60):
            raise RuntimeError("raw latency worker did not start")
        sql, cur = raw_insert_sql(self.vendor), self.conn.cursor()
        cur.execute(sql, ["bench.stamp", b"-1"])  # warm-up job, left out of the figures
        time.sleep(0.5)

        def produce() -> None:
            cur.execute(sql, ["bench.stamp", repr(time.time()).encode()])

        paced(n, produce)
        stamps = out.get(timeout=60 + n * LATENCY_INTERVAL)
        worker.join(30)
        return [(t1 - t0) * 1000 for t0, t1 in stamps if t0 > 0]


def paced(n: int, fn: Callable[[], None]) -> None:
    """Call ``fn`` ``n`` times, one every LATENCY_INTERVAL, on a fixed schedule."""
    due = time.perf_counter()
    for _ in range(n):
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        fn()
        due += LATENCY_INTERVAL


# ---------------------------------------------------------------------------------------
# Headgate: in-process enqueue, subprocess workers.
# ---------------------------------------------------------------------------------------


def django_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = os.environ.get(SETTINGS_ENV, TUNED_SETTINGS)
    env["DATABASE_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("DJANGO_DEBUG", None)
    return env


def instant(value: Any) -> datetime:
    """A timestamp from a raw query: a datetime (PostgreSQL) or ISO text (SQLite)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def epoch(value: Any) -> float:
    """Seconds since the epoch of a stored instant; a naive one (SQLite's text) is UTC."""
    moment = instant(value)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class Headgate:
    def __init__(self, url: str, logdir: Path) -> None:
        from django.db import connection

        from benchmarks.benchapp.tasks import noop, stamp

        self.url = url
        self.env = django_env(url)
        self.conn = connection
        self.vendor = connection.vendor
        self.noop, self.stamp = noop, stamp
        self.logdir = logdir
        self._log_seq = 0

    def sql(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(query, params or [])
            return cur.fetchall() if cur.description else []

    def reset(self) -> None:
        if self.vendor == "postgresql":
            self.sql("TRUNCATE headgate_job")
        else:
            self.sql("DELETE FROM headgate_job")

    def scalar(self, query: str) -> Any:
        return self.sql(query)[0][0]

    def count(self, state: str) -> int:
        return int(self.sql("SELECT count(*) FROM headgate_job WHERE state = %s", [state])[0][0])

    def backend_pid(self) -> int:
        """The PostgreSQL backend serving Django's connection (opened if it is not yet)."""
        self.conn.ensure_connection()
        return int(self.conn.connection.info.backend_pid)

    def single(self, n: int) -> float:
        """Seconds for ``n`` single enqueues (see :func:`single_runs`)."""
        start = time.perf_counter()
        for _ in range(n):
            self.noop.enqueue()
        return time.perf_counter() - start

    def bulk(self, batches: int) -> float:
        from headgate_django import enqueue

        self.reset()
        noop = self.noop
        enqueue([noop.envelope() for _ in range(BULK)])  # warm-up
        start = time.perf_counter()
        for _ in range(batches):
            enqueue([noop.envelope() for _ in range(BULK)])
        return batches * BULK / (time.perf_counter() - start)

    def bulk_table(self, batches: int) -> float:
        """Jobs/s of raw's bulk insert (rows built in the timed region, sent the same way)
        into headgate's own job table instead of raw's: what the table itself costs, with
        no headgate code at all. Each row is a plain job's, its shape written in as
        constants."""
        from django.db import transaction

        from headgate_django.envelope import fingerprint

        self.reset()
        ids = itertools.count(1)
        sql = table_bulk_sql(self.vendor, BULK)
        db = self.conn.connection  # the driver's own connection, under Django's
        fp = fingerprint("bench.noop", PAYLOAD)

        def cursor() -> Any:
            if self.vendor == "postgresql":  # binding on the server, as raw's cursor does
                import psycopg

                return psycopg.Cursor(db)
            return db.cursor()

        def insert() -> None:
            rows = [(f"{next(ids):026d}", PAYLOAD, fp) for _ in range(BULK)]
            with transaction.atomic(), contextlib.closing(cursor()) as cur:
                if self.vendor == "postgresql":
                    cur.executemany(sql, rows)
                else:
                    cur.execute(sql, [value for row in rows for value in row])

        insert()  # warm-up
        start = time.perf_counter()
        for _ in range(batches):
            insert()
        return batches * BULK / (time.perf_counter() - start)

    def seed(self, n: int) -> None:
        from headgate_django import enqueue

        self.reset()
        for done in range(0, n, BULK):
            enqueue([self.noop.envelope() for _ in range(min(BULK, n - done))])
        if self.vendor == "postgresql":
            self.sql("ANALYZE headgate_job")

    def _worker(self, *args: str) -> subprocess.Popen[bytes]:
        self._log_seq += 1
        log = open(self.logdir / f"worker-{self.vendor}-{self._log_seq}.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, str(ROOT / "manage.py"), "runworkers", *args]
        return subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=log, stderr=log)

    def drain(self, n: int, processes: int, concurrency: int) -> Drain:
        self.seed(n)
        args = ["--burst", "--processes", str(processes), "--concurrency", str(concurrency)]
        commits = pg_commits(self.scalar, self.vendor)
        # RUSAGE_CHILDREN covers the forked worker processes too: the command reaps them
        # before it exits, which adds their CPU to its own children's total.
        cpu = children_cpu()
        with ServerCpu(self.vendor) as server:
            start = time.perf_counter()
            code = self._worker(*args).wait()
            elapsed = time.perf_counter() - start
        cpu = children_cpu() - cpu
        done = self.count("completed")
        if done != n or code:
            raise RuntimeError(
                f"headgate drain completed {done} of {n} jobs (exit code {code}); see {self.logdir}"
            )
        # Store-clock span from the first claim to the last completion.
        first, last = self.sql("SELECT min(claimed_at), max(finalized_at) FROM headgate_job")[0]
        busy = (instant(last) - instant(first)).total_seconds()
        after = pg_commits(self.scalar, self.vendor)
        return Drain(
            n / elapsed,
            n / busy,
            per_1k(cpu, n),
            per_1k(server.seconds(), n),
            None if commits is None or after is None else (after - commits) * 1000 / n,
        )

    def empty_burst(self, processes: int) -> tuple[float, float]:
        """Wall and CPU seconds of ``runworkers --burst --processes P`` starting and exiting idle."""
        self.reset()
        cpu = children_cpu()
        start = time.perf_counter()
        code = self._worker("--burst", "--processes", str(processes)).wait()
        if code:
            raise RuntimeError(f"empty burst exited {code}; see {self.logdir}")
        return time.perf_counter() - start, children_cpu() - cpu

    def latency(self, n: int) -> tuple[list[float], dict[str, list[float]]]:
        """Enqueue → handler start of ``n`` jobs (ms), and each job's time in each leg (ms):
        producer → ``enqueued_at`` → ``claimed_at`` → handler start."""
        self.reset()
        worker = self._worker("--concurrency", "10")
        try:
            self.stamp.enqueue(-1.0)  # warm-up job: the worker is ready once it is done
            self._wait_completed(1, 60)
            time.sleep(0.5)
            paced(n, lambda: self.stamp.enqueue(time.time()))
            self._wait_completed(n + 1, 60 + n * LATENCY_INTERVAL)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        rows = self.sql(
            "SELECT result, enqueued_at, claimed_at FROM headgate_job WHERE kind = 'bench.stamp'"
        )
        out: list[float] = []
        legs: dict[str, list[float]] = {leg: [] for leg in LEGS}
        for value, enqueued_at, claimed_at in rows:
            t0, t1 = json.loads(value) if isinstance(value, str) else value
            if t0 > 0:
                out.append((t1 - t0) * 1000)
                instants = (t0, epoch(enqueued_at), epoch(claimed_at), t1)
                for leg, start, end in zip(LEGS, instants, instants[1:], strict=False):
                    legs[leg].append((end - start) * 1000)
        return out, legs

    def _wait_completed(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count("completed") < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.count('completed')} of {n} jobs completed")
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------
# One database, in a child process with Django set up.
# ---------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def run_child(url: str, size: str, sections: tuple[str, ...], out_path: Path) -> None:
    import django

    django.setup()
    from django.db import connection

    sizes = SIZES[size]
    logdir = Path(tempfile.mkdtemp(prefix="headgate-bench-logs-"))
    hg = Headgate(url, logdir)
    vendor = hg.vendor
    if vendor == "postgresql":
        raw_dsn = url
        version = hg.sql("SHOW server_version")[0][0]
        version = f"PostgreSQL {version}"
    elif vendor == "mysql":
        raw_dsn = url
        version = hg.sql("SELECT VERSION()")[0][0]
        version = f"MariaDB {version.split('-MariaDB')[0]}" if "MariaDB" in version else version
        # The raw drain and latency workers claim with UPDATE … RETURNING, which MariaDB
        # does not have.
        sections = tuple(section for section in sections if section == "enqueue")
    else:
        raw_dsn = str(Path(connection.settings_dict["NAME"]).with_name("raw.sqlite3"))
        import sqlite3

        version = f"SQLite {sqlite3.sqlite_version}"
    raw = Raw(vendor, raw_dsn)
    results: dict[str, Any] = {
        "vendor": vendor,
        "version": version,
        "sizes": sizes,
        "runs": {},
        "load": [os.getloadavg()[0]],
    }
    runs = results["runs"]

    def record(key: str, value: float) -> None:
        runs.setdefault(key, []).append(value)

    def step(label: str) -> None:
        print(f"  [{vendor}] {label}", file=sys.stderr, flush=True)

    if "enqueue" in sections:
        enqueue_runs(hg, raw, sizes, record, step)
    if "drain" in sections:
        drain_runs(hg, raw, sizes, record, step)
    if "latency" in sections:
        latency_runs(hg, raw, sizes, record, step)
    results["load"].append(os.getloadavg()[0])
    shutil.rmtree(logdir, ignore_errors=True)
    out_path.write_text(json.dumps(results))


Record = Callable[[str, float], None]
Step = Callable[[str], None]


@contextlib.contextmanager
def cores_apart(backends: list[int]) -> Iterator[str | None]:
    """Hold this process on one core and the PostgreSQL backends serving it on the others.

    A single enqueue is a ping-pong between this process and its backend, and on a 2-core
    machine that also runs the database the scheduler often puts both on one core, where
    the client's work between two round trips and the backend's work around its commit
    queue behind each other instead of overlapping. A production database usually runs on a
    host of its own, where they never compete. Both sides of the comparison get the same
    placement. Yields ``None`` when the processes are placed, else why they could not be
    (a single core, a backend that is not a local PostgreSQL process, no permission to set
    another process's affinity); the previous affinities come back on exit.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        yield "one core"
        return
    for pid in backends:
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            title = b""
        if b"postgres" not in title:
            yield f"backend {pid} is not a PostgreSQL process on this machine"
            return
    saved = {pid: os.sched_getaffinity(pid) for pid in (0, *backends)}
    try:
        os.sched_setaffinity(0, {cpus[0]})
        for pid in backends:
            os.sched_setaffinity(pid, set(cpus[1:]))
    except OSError as exc:
        reason: str | None = f"affinity not settable ({exc.strerror})"
    else:
        reason = None
    try:
        yield reason
    finally:
        for pid, mask in saved.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, mask)


def single_runs(hg: Headgate, raw: Raw, n: int) -> tuple[float, float]:
    """One repetition of single enqueues: ``n`` calls each side, in alternating blocks.

    Each call waits for its own commit, and on these machines the time a commit takes moves
    by a factor of two from one second to the next. Timed as one run of ``n`` calls after
    the other, the two sides met different seconds (paired ratios from 0.4 to 1.2 within
    one benchmark run); blocks of :data:`SINGLE_BLOCK` calls, in ABBA order, put both
    sides under the same conditions. Returns the jobs/s of headgate and of raw.
    """
    hg.reset()
    raw.reset()
    for side in (hg, raw):  # warm-up: prepared statements, caches
        side.single(20)
    blocks = max(1, n // SINGLE_BLOCK)
    spent = [0.0, 0.0]
    for block in range(blocks):
        order = (0, 1) if block % 4 in (0, 3) else (1, 0)
        for index in order:
            spent[index] += (hg, raw)[index].single(SINGLE_BLOCK)
    calls = blocks * SINGLE_BLOCK
    return calls / spent[0], calls / spent[1]


def enqueue_runs(hg: Headgate, raw: Raw, sizes: dict[str, int], record: Record, step: Step) -> None:
    step(f"enqueue: {sizes['reps']} x ({sizes['single']} single, {sizes['bulk']} x 1000 bulk)")
    for _ in range(sizes["reps"]):
        hg_rate, raw_rate = single_runs(hg, raw, sizes["single"])
        record("single/headgate", hg_rate)
        record("single/raw", raw_rate)
        if hg.vendor == "postgresql":
            with cores_apart([hg.backend_pid(), raw.backend_pid()]) as refused:
                if refused:
                    step(f"single enqueue on separate cores left out: {refused}")
                else:
                    hg_rate, raw_rate = single_runs(hg, raw, sizes["single"])
                    record("single_apart/headgate", hg_rate)
                    record("single_apart/raw", raw_rate)
        record("bulk/headgate", hg.bulk(sizes["bulk"]))
        record("bulk/raw", raw.bulk(sizes["bulk"]))
        record("bulk_table/raw", hg.bulk_table(sizes["bulk"]))


def drain_runs(hg: Headgate, raw: Raw, sizes: dict[str, int], record: Record, step: Step) -> None:
    step("empty burst overhead")
    for _ in range(3):
        for procs in PROCESSES:
            wall, cpu = hg.empty_burst(procs)
            record(f"empty_burst/headgate/p{procs}", wall)
            record(f"empty_burst_cpu/headgate/p{procs}", cpu)

    n = sizes["drain"]
    step(f"drain {n} jobs x {sizes['drain_reps']} reps")
    for _ in range(sizes["drain_reps"]):
        for procs in PROCESSES:
            drains = {f"raw/p{procs}": raw.drain(n, procs)}
            for conc in CONCURRENCY:
                drains[f"headgate/p{procs}/c{conc}"] = hg.drain(n, procs, conc)
            for key, d in drains.items():
                record(f"drain/{key}", d.rate)
                record(f"drain_steady/{key}", d.steady)
                record(f"drain_cpu/{key}", d.cpu_ms_per_1k)
                if d.server_ms_per_1k is not None:
                    record(f"drain_server/{key}", d.server_ms_per_1k)
                if d.commits_per_1k is not None:
                    record(f"drain_commits/{key}", d.commits_per_1k)
                step(f"  {key}: {d.rate:,.0f}/s (steady {d.steady:,.0f}/s)")


def latency_runs(hg: Headgate, raw: Raw, sizes: dict[str, int], record: Record, step: Step) -> None:
    m = sizes["latency"]
    step(f"latency: {m} jobs at 100/s x {sizes['latency_reps']} reps")
    for _ in range(sizes["latency_reps"]):
        samples, legs = hg.latency(m)
        for leg, values in legs.items():
            for name, q in QUANTILES.items():
                record(f"leg/{leg}/{name}", percentile(values, q))
        for system, got in (("headgate", samples), ("raw", raw.latency(m))):
            if len(got) != m:
                raise RuntimeError(f"{system} latency: {len(got)} of {m} samples")
            for name, q in QUANTILES.items():
                record(f"{name}/{system}", percentile(got, q))
            step(
                f"  {system}: "
                + ", ".join(f"{name} {percentile(got, q):.2f} ms" for name, q in QUANTILES.items())
            )
        step(
            "  headgate legs p99: "
            + ", ".join(f"{leg} {percentile(values, 99):.2f}" for leg, values in legs.items())
        )


# ---------------------------------------------------------------------------------------
# The parent: machine facts, fresh databases, tables.
# ---------------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    import django

    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        import psycopg

        driver = f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__})"
    except ImportError:
        driver = "psycopg not installed"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "os": platform.platform(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "driver": driver,
        "load": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
    }


def prepare(database: str, tmp: Path) -> str:
    """A fresh, migrated database; returns its DATABASE_URL."""
    if database == "postgres":
        import psycopg

        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {PG_DB}")
        url = f"{PG_SERVER}/{PG_DB}"
    elif database == "mariadb":
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
        cur = conn.cursor()
        cur.execute(f"DROP DATABASE IF EXISTS {MYSQL_DB}")
        cur.execute(f"CREATE DATABASE {MYSQL_DB} CHARACTER SET utf8mb4")
        conn.close()
        url = f"{MYSQL_SERVER}/{MYSQL_DB}"
    else:
        url = f"sqlite:///{tmp / 'headgate.sqlite3'}"
    env = django_env(url)
    env["DJANGO_SETTINGS_MODULE"] = "sampleproject.settings"
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env=env,
        cwd=ROOT,
        check=True,
    )
    return url


def compile_sources() -> None:
    """Write the bytecode of this checkout's packages, as installing a wheel does.

    A checkout run with ``PYTHONDONTWRITEBYTECODE`` set (as some CI images do) otherwise
    recompiles every module of headgate and the sample project in every worker process it
    starts, which the drains' start-to-exit times would count.
    """
    import compileall

    for package in ("headgate_django", "sampleproject", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=1)


def median(values: list[float]) -> float:
    return statistics.median(values)


def fmt(value: float, unit: str) -> str:
    return f"{value:,.1f}" if unit == "ms" else f"{value:,.0f}"


def verdict(ratio: float, target: str | None, vendor: str) -> tuple[str, str]:
    """The target of the workload ``target`` names, as text, and whether ``ratio`` meets it;
    a PostgreSQL target that ``vendor``'s table has no own one for shows as ``(pg only)``."""
    if target is None or target not in TARGETS:
        return "", ""
    own = TARGETS if vendor == "postgresql" else OTHER_TARGETS
    op, bound = own.get(target, TARGETS[target])
    ok = ratio >= bound if op == ">=" else ratio <= bound
    text = f"{op.replace('>=', '≥').replace('<=', '≤')} {bound:g}"
    if target not in own:
        return text, "(pg only)"
    return text, "PASS" if ok else "MISS"


def table(results: dict[str, Any]) -> str:
    runs, vendor = results["runs"], results["vendor"]

    def cell(key: str, unit: str) -> str:
        values = runs[key]
        if len(values) == 1:
            return fmt(values[0], unit)
        return f"{fmt(median(values), unit)} ({fmt(min(values), unit)}–{fmt(max(values), unit)})"

    rows = []

    def row(label: str, hg: str, raw: str, unit: str, target: str | None) -> None:
        if hg not in runs:  # a section left out with --only
            return
        ratio = median(runs[hg]) / median(runs[raw])
        text, mark = verdict(ratio, target, vendor)
        rows.append(
            f"| {label} | {cell(hg, unit)} | {cell(raw, unit)} | {ratio:.2f} | {text} | {mark} |"
        )

    row("single enqueue, jobs/s", "single/headgate", "single/raw", "jobs/s", "single")
    row(
        "single enqueue, client and backend on separate cores, jobs/s",
        "single_apart/headgate",
        "single_apart/raw",
        "jobs/s",
        "single",
    )
    row("bulk enqueue ×1000, jobs/s", "bulk/headgate", "bulk/raw", "jobs/s", "bulk")
    row(
        "bulk enqueue ×1000, raw's insert into headgate's job table, jobs/s",
        "bulk_table/raw",
        "bulk/raw",
        "jobs/s",
        None,
    )
    for procs in PROCESSES:
        for conc in CONCURRENCY:
            row(
                f"drain, {procs} proc, --concurrency {conc}, jobs/s",
                f"drain/headgate/p{procs}/c{conc}",
                f"drain/raw/p{procs}",
                "jobs/s",
                "drain",
            )
    row("latency p50, ms", "p50/headgate", "p50/raw", "ms", "p50")
    row("latency p99, ms", "p99/headgate", "p99/raw", "ms", "p99")
    row("latency p99.9, ms", "p99.9/headgate", "p99.9/raw", "ms", None)
    if "leg/started/p50" in runs:
        rows.append(
            "\nHeadgate latency by leg (ms; each figure the median over repetitions of that "
            "repetition's percentile):\n\n| leg | p50 | p99 | p99.9 |\n|---|---:|---:|---:|"
        )
        for leg, label in zip(LEGS, LEG_LABELS, strict=True):
            rows.append(
                f"| {label} | "
                + " | ".join(f"{median(runs[f'leg/{leg}/{name}']):.2f}" for name in QUANTILES)
                + " |"
            )
    sizes = results["sizes"]
    raw_kind = "LISTEN/NOTIFY" if vendor == "postgresql" else "1 ms polling"
    head = [
        f"### {results['version']}",
        "",
        "| workload | headgate | raw | headgate/raw | target | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    details = [
        "",
        "Drain detail (medians): steady rate from the first claim to the last completion, "
        "which leaves out process start-up and exit; CPU (user + system) per 1,000 jobs of "
        "the worker processes (headgate's net of start-up, i.e. minus the CPU of an empty "
        "burst with as many processes) and of the PostgreSQL backends serving them, which "
        "machine load moves far less than rates; PostgreSQL transactions committed per 1,000 "
        "jobs (each a WAL flush and a round trip).",
        "",
        "| drain | headgate steady, jobs/s | raw steady, jobs/s | headgate/raw "
        "| headgate worker CPU | raw worker CPU | headgate server CPU | raw server CPU "
        "| headgate commits | raw commits |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cpu(key: str, unit: str = " ms/1k") -> str:
        values = runs.get(key)
        return f"{median(values):,.0f}{unit}" if values else "—"

    drained = "empty_burst/headgate/p1" in runs  # False: no drains run (--only)
    for procs in PROCESSES if drained else ():
        for conc in CONCURRENCY:
            hg, raw = f"headgate/p{procs}/c{conc}", f"raw/p{procs}"
            startup = median(runs[f"empty_burst_cpu/headgate/p{procs}"]) * 1e6 / sizes["drain"]
            net = median(runs[f"drain_cpu/{hg}"]) - startup
            steady_hg = median(runs[f"drain_steady/{hg}"])
            steady_raw = median(runs[f"drain_steady/{raw}"])
            details.append(
                f"| {procs} proc, --concurrency {conc} | {steady_hg:,.0f} | {steady_raw:,.0f} "
                f"| {steady_hg / steady_raw:.2f} | {net:,.0f} ms/1k "
                f"| {cpu(f'drain_cpu/{raw}')} | {cpu(f'drain_server/{hg}')} "
                f"| {cpu(f'drain_server/{raw}')} | {cpu(f'drain_commits/{hg}', '/1k')} "
                f"| {cpu(f'drain_commits/{raw}', '/1k')} |"
            )
    bursts = {procs: runs[f"empty_burst/headgate/p{procs}"] for procs in PROCESSES if drained}
    notes = [
        "",
        f"Medians (min–max) of {sizes['reps']} repetitions for enqueue, {sizes['drain_reps']} "
        f"for drains of {sizes['drain']:,} jobs, {sizes['latency_reps']} for latency "
        f"({sizes['latency']} jobs at 100/s each; raw worker: {raw_kind}, claiming one at a "
        "time). Raw drain: claim 100 per UPDATE … SKIP LOCKED, one fenced UPDATE to complete "
        "(PostgreSQL: sequential scans off, as in headgate's claim function), "
        "same process count as the headgate row. Drains are timed from process start to exit"
        + (
            "; an empty `runworkers --burst` takes "
            + " and ".join(
                f"{median(b):.2f} s with --processes {procs}" for procs, b in bursts.items()
            )
            + f" (medians of {len(bursts[1])}). "
            if bursts
            else ". "
        )
        + (
            "The single enqueue on separate cores holds this process on one core and its two "
            "backends (headgate's and raw's) on the other, as a database on a host of its "
            "own would be; the row above it leaves them where the scheduler puts them. "
            if "single_apart/headgate" in runs
            else ""
        )
        + f"1-minute load average {results['load'][0]:.1f} at the start of this database's "
        f"runs, {results['load'][1]:.1f} at the end ({os.cpu_count()} cores)"
        + (
            ": the machine was busy, so absolute figures are depressed and noisy."
            if max(results["load"]) > (os.cpu_count() or 1)
            else "."
        ),
    ]
    return "\n".join(head + rows + notes + (details if drained else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database",
        choices=["sqlite", "postgres", "mariadb", "both", "all"],
        default="sqlite",
        help="both: SQLite and PostgreSQL; all: those and MariaDB",
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs (5,000-job drains)")
    parser.add_argument("--only", choices=SECTIONS, help="run one section (default: all)")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="run headgate with a project's default settings (benchmarks/defaults_settings.py)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = "quick" if args.quick else "full"
    if args.child:
        run_child(args.child, size, (args.only,) if args.only else SECTIONS, args.out)
        return

    sys.path.insert(0, str(ROOT))
    if args.defaults:
        os.environ[SETTINGS_ENV] = DEFAULT_SETTINGS
    compile_sources()
    facts = machine()
    print("## Machine\n")
    for key in ("cpu", "cores", "os", "python", "django", "driver"):
        print(f"- {key}: {facts[key]}")
    print(f"- load average at start: {facts['load']}")
    print(f"- headgate's settings: {os.environ.get(SETTINGS_ENV, TUNED_SETTINGS)}")
    databases = {"both": ["sqlite", "postgres"], "all": ["sqlite", "postgres", "mariadb"]}.get(
        args.database, [args.database]
    )
    everything: dict[str, Any] = {
        "machine": facts,
        "size": size,
        "settings": os.environ.get(SETTINGS_ENV, TUNED_SETTINGS),
        "databases": {},
    }
    started = time.monotonic()
    for database in databases:
        with tempfile.TemporaryDirectory(prefix="headgate-bench-") as tmp:
            url = prepare(database, Path(tmp))
            out = Path(tmp) / "results.json"
            cmd = [sys.executable, __file__, "--child", url, "--out", str(out)]
            if args.quick:
                cmd.append("--quick")
            if args.only:
                cmd += ["--only", args.only]
            subprocess.run(cmd, env=django_env(url), cwd=ROOT, check=True)
            results = json.loads(out.read_text())
        everything["databases"][results["vendor"]] = results
        print(f"- {results['version']}")
    for results in everything["databases"].values():
        print()
        print(table(results))
    print(
        f"\nLoad average at end: {'{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg())}; "
        f"total {time.monotonic() - started:.0f} s."
    )
    if args.json:
        args.json.write_text(json.dumps(everything, indent=2))


if __name__ == "__main__":
    main()

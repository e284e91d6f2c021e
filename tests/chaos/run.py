#!/usr/bin/env python
"""The chaos run: kill workers and restart the database under load, then check that nothing
was lost, doubled or left stuck.

    .venv/bin/python -m tests.chaos.run [--database postgres|mariadb] [--minutes 2]
        [--jobs 10000] [--workflows 200] [--durable 200] [--json REPORT.json]

It starts a private database server (never a shared one), migrates it, installs the audit
triggers, starts ``--workers`` ``runworkers`` processes and, for ``--minutes``, enqueues
the workload in waves while it SIGKILLs a random worker every ``--kill-every`` seconds,
starting a replacement each time (every ``--pause-every``-th fault is a SIGSTOP past the
lease instead, then SIGCONT and SIGTERM), and restarts the database once half-way. Then it
lets the system drain, stops the workers gracefully, checks the invariants
(``tests/chaos/invariants.py``) and prints a report. Exit status 0 means every invariant
held. Everything it started is stopped on the way out, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.chaos.fleet import Fleet, worker_env  # noqa: E402
from tests.chaos.servers import Server, make_server, restart  # noqa: E402

T = TypeVar("T")
PRODUCE_SHARE = 0.85  # of the fault window spent enqueueing
PAUSE_BEYOND_LEASE = 5.0  # a paused worker stays stopped this long after its leases lapse


def headgate_settings(lease_ttl: float) -> dict[str, Any]:
    """HEADGATE for the workers and this process: fast maintenance and short backoffs, so a
    lost lease or a failed attempt comes back within seconds rather than minutes.

    ``CRASH_LIMIT`` is raised from 3 to 10: with a fault every 2 s, a job now and then sits
    on three faulted workers in a row (a replacement killed while its first claims run),
    and quarantining it is then correct — but it would fail its workflow. At 10, a
    quarantine means something is wrong. The default limit is covered by
    ``tests/integration/test_kill.py``.
    """
    return {
        "CRASH_LIMIT": 10,
        "AUTODISCOVER_MODULES": ["chaos_tasks"],
        "LEASE_TTL": lease_ttl,
        "DUTY_INTERVAL": 0.5,
        "CRASH_BACKOFF": 0.1,
        "IDLE_BACKOFF_MAX": 0.5,
        "BACKOFF_BASE": 0.1,
        "BACKOFF_CAP": 2,
        "SHUTDOWN_TIMEOUT": 10,
        "COORDINATOR_POLL": 0.5,
    }


@dataclass
class Report:
    database: str
    seconds_of_faults: float
    workers: int
    concurrency: int
    kills: int = 0
    pauses: int = 0
    restarts: int = 0
    outage_seconds: float = 0.0
    jobs: int = 0
    dag_workflows: int = 0
    durable_workflows: int = 0
    enqueue_retries: int = 0
    executions: int = 0
    reruns: list[str] = field(default_factory=list)  # jobs run again in place (logged)
    drain_seconds: float | None = 0.0  # None: jobs were still unfinished at the timeout
    died: list[str] = field(default_factory=list)  # workers that exited by themselves
    leases_held_at_kills: int = 0
    leases_held_at_pauses: int = 0
    leases_landed_after_pauses: int = 0  # committed by a paused worker when it resumed
    session_waits_cut: int = 0  # counts taken while a stopped worker's statement still waited
    crashes_charged: int = 0
    crashes_charged_paused: int = 0
    stale_attempts_stopped: int = 0
    most_crashes_on_one_job: int = 0
    quarantine_histories: dict[str, list[str]] = field(default_factory=dict)
    quarantined: int = 0
    worker_exit_codes: dict[str, int] = field(default_factory=dict)
    invariants: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.invariants) and all(i["ok"] for i in self.invariants)

    def text(self) -> str:
        lines = [
            f"chaos report ({self.database})",
            f"  faults for      {self.seconds_of_faults:.0f} s with {self.workers} workers "
            f"× {self.concurrency} threads",
            f"  kills           {self.kills} (SIGKILL, each followed by a replacement)",
            f"  pauses          {self.pauses} (SIGSTOP beyond the lease, then SIGCONT and SIGTERM)",
            f"  restarts        {self.restarts} of the database, down {self.outage_seconds:.1f} s",
            f"  jobs            {self.jobs}",
            f"  workflows       {self.dag_workflows} DAG, {self.durable_workflows} durable",
            f"  executions      {self.executions} recorded by the handlers",
            f"  reruns in place {len(self.reruns)} (a handler's session died under it; run "
            "again under its lease)",
            f"  enqueue retries {self.enqueue_retries} (waves sent again after an outage)",
            f"  leases killed   {self.leases_held_at_kills}; paused {self.leases_held_at_pauses}"
            f" (+{self.leases_landed_after_pauses} committed when a paused worker resumed;"
            f" {self.session_waits_cut} counted while one of its statements still waited)",
            f"  crashes charged {self.crashes_charged} for kills; {self.crashes_charged_paused} "
            "for pauses",
            f"  stale attempts  {self.stale_attempts_stopped} stopped or refused after a pause",
            f"  quarantined     {self.quarantined} (most crashes on one job: "
            f"{self.most_crashes_on_one_job}; CRASH_LIMIT 10)",
            "  drained in      "
            + (
                f"{self.drain_seconds:.1f} s after the last fault"
                if self.drain_seconds is not None
                else "— jobs were still unfinished at the drain timeout"
            ),
            "  invariants:",
        ]
        for inv in self.invariants:
            lines.append(f"    [{'ok' if inv['ok'] else 'FAIL'}] {inv['name']}: {inv['detail']}")
        for job, trail in self.quarantine_histories.items():
            lines.append(f"  quarantined {job}, its audit trail:")
            lines += [f"    {line}" for line in trail]
        lines.append(f"  result          {'PASSED' if self.ok else 'FAILED'}")
        return "\n".join(lines)


def retrying(fn: Callable[[], T], timeout: float = 60.0) -> T:
    """Call ``fn`` until the database answers (the orchestrator rides out the restart too)."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except DatabaseError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def leases_held(worker_id: str) -> int:
    from headgate_django.models import Job

    return Job.objects.filter(state="running", claimed_by=worker_id).count()


def sessions_of(ports: frozenset[int]) -> dict[int, bool]:
    """The server sessions that come from these client ports: each one's id (backend pid,
    connection id) and whether it is running a statement."""
    from django.db import connection

    if not ports:
        return {}
    marks = ", ".join(["%s"] * len(ports))
    if connection.vendor == "postgresql":
        sql = f"SELECT pid, state = 'active' FROM pg_stat_activity WHERE client_port IN ({marks})"
    else:
        sql = (
            "SELECT ID, COMMAND = 'Query' FROM information_schema.PROCESSLIST "
            f"WHERE CAST(SUBSTRING_INDEX(HOST, ':', -1) AS UNSIGNED) IN ({marks})"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, sorted(ports))
        return {int(session): bool(busy) for session, busy in cursor.fetchall()}


def server_now() -> datetime:
    """The server's clock as the audit trail stamps its rows (``NOW(6)`` is what MariaDB's
    column default records, in the session's time zone, not the store clock's UTC)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT clock_timestamp()" if connection.vendor == "postgresql" else "SELECT NOW(6)"
        )
        return cursor.fetchone()[0]  # type: ignore[no-any-return]


def wait_sessions(
    ports: frozenset[int], done: Callable[[dict[int, bool]], bool], limit: float
) -> bool:
    """Wait until the server's sessions from a stopped or killed worker satisfy ``done``; a
    statement the server had already received (a claim, a completion) still runs, and
    commits, after the process stopped sending. False if they still do not after ``limit``
    seconds: a statement waiting for a row lock that another stopped worker holds waits
    until that one resumes, which the run does only after this returns. Such a statement
    creates no lease (claims skip locked rows), so the count can go ahead."""
    deadline = time.monotonic() + limit
    while not done(retrying(lambda: sessions_of(ports))):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def unfinished() -> int:
    from headgate_django.kernel.states import TERMINAL_STATES
    from headgate_django.models import Job

    return Job.objects.exclude(state__in=[s.value for s in TERMINAL_STATES]).count()


def faults(
    args: argparse.Namespace, server: Server, fleet: Fleet, load: Any, report: Report
) -> None:
    """Enqueue in waves over the first 85 % of the window (so the kills keep finding work
    to interrupt); every ``kill_every`` s kill a worker, or every ``pause_every``-th time
    pause one for longer than its lease; restart the database once half-way."""
    began = time.monotonic()
    window = args.minutes * 60
    count = 0
    next_fault = began + args.kill_every
    restart_at: float | None = began + window / 2
    while (now := time.monotonic()) < began + window:
        load.send_until((now - began) / (window * PRODUCE_SHARE))
        if now >= next_fault:
            count += 1
            pause = args.pause_every and count % args.pause_every == 0
            fault(args, fleet, report, now - began, pause=pause, server_port=server.port)
            next_fault += args.kill_every
        fleet.resume_due(time.monotonic())
        if restart_at is not None and now >= restart_at:
            report.outage_seconds = restart(server)
            report.restarts += 1
            restart_at = None
        report.died += fleet.replace_exited()
        time.sleep(0.05)
    while load.sent < load.total:
        load.send_until(1.0)
        time.sleep(0.2)
    report.seconds_of_faults = time.monotonic() - began


def fault(
    args: argparse.Namespace,
    fleet: Fleet,
    report: Report,
    at: float,
    *,
    pause: bool,
    server_port: int,
) -> None:
    """Pause or kill one worker, count the leases it held, and start a replacement.

    A killed worker's count is taken once the server has ended all its sessions: nothing it
    sent can commit after that. A paused worker's sessions stay open, and one may be inside
    a transaction that moved rows to ``running`` (a MariaDB claim, a durable pass leasing
    an Operation) and commits only when the worker resumes. So its count is taken once none
    of its sessions runs a statement, and the rows those sessions had moved to ``running``
    by then are counted too, to be counted again after the drain (:func:`check`)."""
    from tests.chaos import audit

    paused = fleet.pause_random(args.lease_ttl + PAUSE_BEYOND_LEASE, server_port) if pause else None
    if paused:
        victim = paused.worker.worker_id
        if not wait_sessions(paused.ports, lambda sessions: not any(sessions.values()), 2.0):
            report.session_waits_cut += 1
        sessions = frozenset(retrying(lambda: sessions_of(paused.ports)))
        stopped_at = retrying(server_now)
        paused.sessions, paused.stopped_at = sessions, stopped_at
        paused.leases_entered = retrying(lambda: audit.leases_entered(sessions, stopped_at))
    else:
        kill = fleet.kill_random(at, server_port)
        victim = kill.worker_id
        if not wait_sessions(kill.ports, lambda sessions: not sessions, 10.0):
            report.session_waits_cut += 1
    held = retrying(lambda: leases_held(victim))
    if paused:
        report.pauses += 1
        report.leases_held_at_pauses += held
    else:
        report.kills += 1
        report.leases_held_at_kills += held
    fleet.fill()


def drain(fleet: Fleet, timeout: float) -> float | None:
    """Seconds until no job is left unfinished; None if some still are after ``timeout``
    (the invariants then name them)."""
    began = time.monotonic()
    while retrying(unfinished):
        fleet.resume_due(time.monotonic())
        if time.monotonic() - began > timeout:
            return None
        time.sleep(0.5)
    return time.monotonic() - began


def check(fleet: Fleet, load: Any, report: Report) -> None:
    from headgate_django.models import Quarantine
    from tests.app.models import Execution
    from tests.chaos import audit
    from tests.chaos import invariants as inv

    transitions = audit.transitions()
    report.reruns = sorted(
        inv.reruns_logged(log.read_text(errors="replace") for log in fleet.logdir.glob("*.log"))
    )
    # Rows a paused worker's open transactions had moved to running, committed when it
    # resumed: its leases too, though no count at the pause could see them.
    report.leases_landed_after_pauses = sum(
        audit.leases_entered(p.sessions, p.stopped_at) - p.leases_entered
        for p in fleet.pauses
        if p.stopped_at is not None
    )
    crashes, report.crashes_charged, report.crashes_charged_paused = inv.crashes_match_faults(
        transitions,
        killed={k.worker_id for k in fleet.kills},
        held_at_kills=report.leases_held_at_kills,
        paused={p.worker.worker_id for p in fleet.pauses},
        held_at_pauses=report.leases_held_at_pauses + report.leases_landed_after_pauses,
    )
    quarantine, report.quarantined = inv.quarantine_expected()
    clean = [f"{w} exited {c}" for w, c in report.worker_exit_codes.items() if c != 0]
    clean += [f"{w} exited by itself during the run" for w in report.died]
    checks = [
        inv.jobs_terminal(load),
        inv.completed_once(transitions),
        inv.no_stale_writes(transitions, report.reruns),
        inv.dags_succeeded(load, transitions),
        inv.durables_succeeded(load),
        crashes,
        quarantine,
        inv.verdict("workers stop cleanly", clean, "none died by itself; all drained on SIGTERM"),
    ]
    report.executions = Execution.objects.count()
    report.most_crashes_on_one_job = max((t.new_crash for t in transitions), default=0)
    report.quarantine_histories = {
        job: audit.history(job)
        for job in Quarantine.objects.values_list("sample_job_id", flat=True)[:5]
    }
    # What the paused workers' stale attempts were told when they resumed: evidence that
    # the fencing checks above had stale writes to refuse.
    report.stale_attempts_stopped = sum(
        p.worker.log.read_text(errors="replace").count(marker)
        for p in fleet.pauses
        for marker in ("was lost; telling the handler to stop", "did not land")
    )
    report.invariants = [asdict(c) for c in checks]


def setup_django(url: str, headgate: dict[str, Any]) -> None:
    os.environ.update(worker_env(url, headgate))
    os.environ["HEADGATE_TEST_LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.core.management import call_command

    from tests.chaos import audit

    call_command("migrate", verbosity=0)
    audit.install()


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database", choices=["postgres", "mariadb"], default="postgres")
    p.add_argument("--minutes", type=float, default=2.0, help="how long the faults last")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--workflows", type=int, default=200, help="DAG workflows (fan-out/fan-in)")
    p.add_argument("--durable", type=int, default=200, help="durable workflows")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--kill-every", type=float, default=2.0, metavar="SECONDS")
    p.add_argument(
        "--pause-every",
        type=int,
        default=5,
        metavar="N",
        help="every N-th fault is a pause instead of a kill (0: kills only)",
    )
    p.add_argument("--lease-ttl", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--drain-timeout", type=float, default=180.0, metavar="SECONDS")
    p.add_argument("--seed", type=int, default=None, help="which workers die (default: random)")
    p.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = p.parse_args(argv)
    for name in ("minutes", "kill_every", "lease_ttl", "drain_timeout"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("jobs", "workflows", "durable"):
        if getattr(args, name) < 0:
            p.error(f"--{name} cannot be negative")
    if args.pause_every < 0:
        p.error("--pause-every cannot be negative")
    if args.workers < 1 or args.concurrency < 1:
        p.error("--workers and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # A SIGTERM (a CI timeout, a test's cleanup) unwinds through the finally below, which
    # stops the workers and the private server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    report = Report(args.database, 0.0, args.workers, args.concurrency)
    server = make_server(args.database)
    fleet: Fleet | None = None
    logdir = Path(tempfile.mkdtemp(prefix="headgate-chaos-logs-"))
    try:
        server.create()
        headgate = headgate_settings(args.lease_ttl)
        setup_django(server.url, headgate)
        from tests.chaos.workload import Workload

        load = Workload(args.jobs, args.workflows, args.durable)
        report.jobs, report.dag_workflows, report.durable_workflows = (
            load.jobs,
            load.dags,
            load.durables,
        )
        fleet = Fleet(
            env=worker_env(server.url, headgate),
            logdir=logdir,
            size=args.workers,
            concurrency=args.concurrency,
            seed=seed,
        )
        fleet.fill()
        faults(args, server, fleet, load, report)
        report.enqueue_retries = load.retries
        report.drain_seconds = drain(fleet, args.drain_timeout)
        report.worker_exit_codes = fleet.stop()
        check(fleet, load, report)
    finally:
        if fleet is not None:
            fleet.kill_all()
        server.destroy()
    print(report.text())
    print(f"  seed {seed}; worker logs in {logdir}")
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

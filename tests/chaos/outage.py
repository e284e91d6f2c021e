#!/usr/bin/env python
"""Workers ride out a database outage shorter than the lease TTL.

    .venv/bin/python -m tests.chaos.outage [--database postgres|mariadb] [--down 5]

Two ``runworkers`` processes (lease TTL 6 s) run 12 handlers of 3 s each; the private
database is stopped for ``--down`` seconds while they run, so every handler finishes while
it is down. Then it is started again and one more job is enqueued. What must hold:

- the workers log the failed calls, back off and reconnect: the job enqueued after the
  restart completes within 10 s of the database being back;
- no crash is charged for the outage (the audit sees no ``crash_attempt`` change) and no
  worker exits;
- every handler that finished during the outage is acknowledged once the database is back:
  each job completed on its first attempt, after exactly one execution (nothing re-ran).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.chaos.fleet import Fleet, worker_env  # noqa: E402
from tests.chaos.run import headgate_settings, retrying, setup_django  # noqa: E402
from tests.chaos.servers import make_server  # noqa: E402

LEASE_TTL = 6.0
HANDLERS = 12
HANDLER_SECONDS = 3.0
RECONNECT_WITHIN = 10.0


def wait(predicate, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Poll until ``predicate()``; return the seconds it took."""
    began = time.monotonic()
    while not retrying(predicate):
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - began


def scenario(server, fleet: Fleet, down: float) -> list[tuple[str, bool, str]]:  # type: ignore[no-untyped-def]
    from headgate_django.models import Job
    from tests.app.chaos_tasks import AFTER_LAST_WRITE, chaos_slow
    from tests.app.models import Execution
    from tests.chaos import audit

    ids = [chaos_slow.enqueue(seconds=HANDLER_SECONDS) for _ in range(HANDLERS)]
    # Every handler past its last query (the fenced progress write after its record): the
    # database goes away under handlers that no longer use it. One caught mid-write fails
    # that attempt and runs again, as it must, which is not what this scenario measures.
    wait(
        lambda: Job.objects.filter(pk__in=ids, progress__current=1).count() == HANDLERS,
        60,
        "handlers",
    )
    time.sleep(AFTER_LAST_WRITE)  # MySQL's autocommit switch after the write's commit
    stopping = time.monotonic()
    server.stop()
    time.sleep(down)
    server.start()
    back = time.monotonic()
    probe = retrying(lambda: chaos_slow.enqueue(seconds=0.0))
    waited = wait(lambda: Job.objects.filter(pk=probe, state="completed").exists(), 60, "probe")
    probe_after = time.monotonic() - back
    wait(lambda: Job.objects.filter(pk__in=ids, state="completed").count() == HANDLERS, 60, "all")
    rows = {j.id: j for j in Job.objects.filter(pk__in=[*ids, probe])}
    runs = {j: Execution.objects.filter(job_id=j).count() for j in ids}
    charged = [t.job_id for t in audit.transitions() if t.charged_crash]
    logs = "".join(w.log.read_text(errors="replace") for w in fleet.live)
    return [
        (
            "reconnect",
            probe_after <= RECONNECT_WITHIN,
            f"unreachable {back - stopping:.1f} s in all (stop, wait, start); a job enqueued "
            f"after the restart completed {probe_after:.1f} s after the database was back (limit {RECONNECT_WITHIN:.0f} s; {waited:.1f} s after enqueue)",
        ),
        (
            "no crash for the outage",
            not charged and all(r.crash_attempt == 0 for r in rows.values()),
            f"crashes charged: {charged or 'none'}",
        ),
        (
            "finished handlers acknowledged after reconnect",
            all(rows[j].attempt == 0 and runs[j] == 1 for j in ids),
            f"{HANDLERS} jobs completed on their first attempt; executions per job: "
            f"{sorted(set(runs.values()))}",
        ),
        (
            "workers logged the outage and stayed up",
            "retrying in" in logs and not fleet.exited(),
            f"{logs.count('retrying in')} retried writes logged; "
            f"{len(fleet.exited())} worker(s) exited",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database", choices=["postgres", "mariadb"], default="postgres")
    p.add_argument("--down", type=float, default=5.0, help="seconds the database is down")
    args = p.parse_args(argv)
    if not 0 < args.down < LEASE_TTL:
        p.error(f"--down must be between 0 and the lease TTL ({LEASE_TTL:.0f} s)")
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = make_server(args.database)
    fleet: Fleet | None = None
    logdir = Path(tempfile.mkdtemp(prefix="headgate-outage-logs-"))
    try:
        server.create()
        headgate = headgate_settings(LEASE_TTL)
        setup_django(server.url, headgate)
        fleet = Fleet(
            env=worker_env(server.url, headgate), logdir=logdir, size=2, concurrency=8, seed=0
        )
        fleet.fill()
        try:
            results = scenario(server, fleet, args.down)
        except RuntimeError as exc:  # a wait timed out: report it like any failed check
            results = [("scenario", False, str(exc))]
        codes = fleet.stop()
        results.append(("workers stop cleanly", set(codes.values()) == {0}, f"exit codes {codes}"))
    finally:
        if fleet is not None:
            fleet.kill_all()
        server.destroy()
    print(
        f"outage report ({args.database}): database down {args.down:.1f} s, lease TTL "
        f"{LEASE_TTL:.0f} s"
    )
    for name, ok, detail in results:
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}")
    print(f"  worker logs in {logdir}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())

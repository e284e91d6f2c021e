"""The maintenance verbs behind the singleton duties: promote, reclaim, evict.

Each works in bounded batches so one call never holds locks for long, and returns what it
did so the duty can log it ("nothing silent").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from headgate_django.conf import headgate_settings
from headgate_django.kernel.states import EVICTABLE_STATES, WAITING_STATES, State, lease_lost_target
from headgate_django.store import vendor as v
from headgate_django.store.effect_records import effects_delete_gone
from headgate_django.store.estimates import Count, capped_count
from headgate_django.store.fenced import append_error, error_entry
from headgate_django.store.rows import prep

#: The states promotion moves, written as the due index's condition is (``states_in``).
_DUE_STATES = v.states_in((State.SCHEDULED, State.RETRYABLE))


def job_promote_due(*, limit: int = 1000, using: str = "default") -> int:
    """Move due ``scheduled`` and ``retryable`` jobs to ``available``, earliest due first.

    On PostgreSQL the order is also what keeps the scan on ``headgate_job_due``. Finished
    jobs keep the ``scheduled_at`` of their run, in the past, so the column's statistics
    say nearly every row is due, and the planner, taking the state and the time as
    independent, expected a sequential scan to meet a batch of due jobs at once. With the
    waiting jobs all in the future it read the whole table instead, every 0.2 s (240 ms a
    pass beside 1.3 million finished jobs). In the index's order a ``LIMIT`` stops at once.
    Elsewhere the batch is taken as found: MySQL/MariaDB's index leads with the state, which
    two states cannot read in time order, and SQLite keeps no statistics to mislead it.
    """
    conn = v.connection_for(using)
    order = " ORDER BY scheduled_at" if conn.vendor == "postgresql" else ""
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM headgate_job WHERE state IN ({_DUE_STATES}) "
            f"AND scheduled_at <= {v.cutoff(conn)}{order} LIMIT %s{v.skip_locked(conn)}",
            [limit],
        )
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return 0
        cursor.execute(
            f"UPDATE {v.jobs_by_id(conn)} SET state = %s "
            f"WHERE id IN ({v.placeholders(len(ids))}) AND state IN (%s, %s)",
            [State.AVAILABLE.value, *ids, State.SCHEDULED.value, State.RETRYABLE.value],
        )
        return cursor.rowcount


@dataclass
class ReclaimReport:
    retried: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)  # fingerprints


def job_reclaim_expired(*, limit: int = 500, using: str = "default") -> ReclaimReport:
    """Expired leases are crashes: charge ``crash_attempt``, requeue at the back, or quarantine.

    The crash is attributed to the step in progress (from the checkpoint), so an operator
    sees where the worker died.
    """
    conn = v.connection_for(using)
    s = headgate_settings
    report = ReclaimReport()
    _sweep_recent_quarantines(conn, using)
    crash_backoff_ms = int(s.CRASH_BACKOFF.total_seconds() * 1000)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        from headgate_django.store.deadlines import archive_reclaimed_past_deadline

        archive_reclaimed_past_deadline(cursor, conn, limit)
        cursor.execute(
            "SELECT id, crash_attempt, attempt, fingerprint, kind, payload, errors, checkpoint, "
            f"claimed_by, {v.now(conn)} FROM headgate_job "
            f"WHERE state = %s AND lease_expires_at < {v.cutoff(conn)} LIMIT %s{v.skip_locked(conn)}",
            [State.RUNNING.value, limit],
        )
        for (
            job_id,
            crashes,
            attempt,
            fp,
            kind,
            payload,
            errors,
            checkpoint,
            by,
            at,
        ) in cursor.fetchall():
            step = _in_progress_step(checkpoint)
            message = f"lease expired (worker {by or '?'} stopped renewing)"
            if step:
                message += f" during step {step!r}"
            entry = error_entry(conn, at, attempt + 1, "crash", message, None, worker=by)
            new_errors = prep(conn, "errors", append_error(errors, entry))
            target = lease_lost_target(crashes, s.CRASH_LIMIT)
            if target is State.RETRYABLE:
                cursor.execute(
                    f"UPDATE headgate_job SET state = %s, crash_attempt = crash_attempt + 1, "
                    f"errors = %s, scheduled_at = {v.plus_ms(conn)}, lease_id = NULL, "
                    "lease_expires_at = NULL WHERE id = %s",
                    [State.RETRYABLE.value, new_errors, crash_backoff_ms, job_id],
                )
                report.retried.append(job_id)
            else:
                cursor.execute(
                    f"UPDATE headgate_job SET state = %s, crash_attempt = crash_attempt + 1, "
                    f"errors = %s, finalized_at = {v.now(conn)}, lease_id = NULL, "
                    "lease_expires_at = NULL WHERE id = %s",
                    [State.QUARANTINED.value, new_errors, job_id],
                )
                _quarantine(cursor, conn, fp, kind, payload, job_id, crashes + 1, message)
                report.quarantined.append(fp)
    return report


#: How long after a quarantine each reclaim pass looks again for its fingerprint's jobs.
SWEEP_AFTER_QUARANTINE_MS = 10 * 60 * 1000


def _sweep_recent_quarantines(conn: Any, using: str) -> None:
    """Quarantine the waiting jobs of fingerprints quarantined in the last minutes.

    The quarantine moves the fingerprint's waiting jobs, and an enqueue refuses a
    quarantined fingerprint, each in a statement that cannot see the other's uncommitted
    write: a job enqueued (or its transaction committed) while the quarantine was being
    written slips through as available, and would crash workers again up to the crash limit.
    Looking again on the next passes catches it, as well as a job of the fingerprint that
    was running at the quarantine and went back to wait. Here, not in the enqueue: the
    enqueue path stays one statement. The quarantine rows are locked, so a release that
    deletes one is waited for (or seen) and its released jobs are not taken back.
    """
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT fingerprint FROM headgate_quarantine WHERE quarantined_at >= {v.plus_ms(conn)}"
            f"{v.for_update(conn)}",
            [-SWEEP_AFTER_QUARANTINE_MS],
        )
        fingerprints = sorted(row[0] for row in cursor.fetchall())
        if fingerprints:
            _quarantine_waiting(cursor, conn, fingerprints)


def _in_progress_step(checkpoint: Any) -> str | None:
    import json

    if isinstance(checkpoint, str | bytes):
        checkpoint = json.loads(checkpoint)
    return (checkpoint or {}).get("in_progress_step")


def _quarantine(
    cursor: Any, conn: Any, fp: str, kind: str, payload: Any, job_id: str, crashes: int, reason: str
) -> None:
    # Insert-if-absent in one statement: a check-then-insert let a second reclaim pass
    # running at once (its duty lease lapsed mid-pass) fail on the key and roll back its
    # whole batch. The first row stays: it names the job that crossed the limit first.
    cursor.execute(
        "INSERT INTO headgate_quarantine (fingerprint, kind, crash_count, quarantined_at, "
        f"sample_payload, sample_job_id, reason) VALUES (%s, %s, %s, {v.now(conn)}, %s, %s, %s)"
        + (
            " ON DUPLICATE KEY UPDATE fingerprint = fingerprint"
            if conn.vendor == "mysql"
            else " ON CONFLICT (fingerprint) DO NOTHING"
        ),
        [fp, kind, crashes, payload, job_id, reason],
    )
    _quarantine_waiting(cursor, conn, [fp])


def _quarantine_waiting(cursor: Any, conn: Any, fingerprints: list[str]) -> None:
    """Quarantine the waiting jobs of ``fingerprints``.

    MySQL/MariaDB find waiting jobs by the generated column that is their fingerprint only
    while they wait (migration 0020); elsewhere a partial index has that condition, which
    the statement repeats in its text for SQLite to match it."""
    column = "fp_waiting" if conn.vendor == "mysql" else "fingerprint"
    cursor.execute(
        f"UPDATE headgate_job SET state = %s, finalized_at = {v.now(conn)} "
        f"WHERE {column} IN ({v.placeholders(len(fingerprints))}) "
        f"AND state IN ({v.states_in(sorted(WAITING_STATES))})",
        [State.QUARANTINED.value, *fingerprints],
    )


def _evictable_where(conn: Any) -> str:
    return f"state IN ({v.states_in(sorted(EVICTABLE_STATES))}) AND expires_at <= {v.cutoff(conn)}"


def job_evict_retained(*, limit: int = 1000, using: str = "default") -> dict[str, int]:
    """Delete terminal rows whose retention has lapsed, with their effect records; return
    the count per state.

    At most ``limit`` rows, the first to expire of each state, read through the eviction
    index in its order and locked with ``SKIP LOCKED``: it never waits for a row a worker
    or an operator holds, and it holds its own locks only for one small delete. Where
    ``DELETE … RETURNING`` exists that is one statement; MySQL/MariaDB select the rows,
    then delete them, in one transaction.
    """
    conn = v.connection_for(using)
    where = _evictable_where(conn)
    # The order is the eviction index's: without it, statistics taken while a backlog was
    # expired make a sequential scan look cheaper than the index for "any N expired rows",
    # and once the rows it meets first are gone every batch reads the table from its start
    # (on PostgreSQL, 5.5M rows, 1M expired: a drain beside eviction ran 20-30% slower).
    rows_due = (
        f"FROM headgate_job WHERE {where} ORDER BY state, expires_at LIMIT %s{v.skip_locked(conn)}"
    )
    counts: dict[str, int] = {}
    if v.has_returning(conn):
        with transaction.atomic(using=using), conn.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM headgate_job WHERE id IN (SELECT id {rows_due}) RETURNING id, state",
                [limit],
            )
            rows = cursor.fetchall()
            for _, state in rows:
                counts[state] = counts.get(state, 0) + 1
            effects_delete_gone(cursor, [row[0] for row in rows])
        return counts
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(f"SELECT id, state {rows_due}", [limit])
        rows = cursor.fetchall()
        if not rows:
            return counts
        for _, state in rows:
            counts[state] = counts.get(state, 0) + 1
        gone = [row[0] for row in rows]
        cursor.execute(f"DELETE FROM headgate_job WHERE id IN ({v.placeholders(len(gone))})", gone)
        effects_delete_gone(cursor, gone)
    return counts


@dataclass
class EvictionPass:
    """What one eviction pass did: rows per state, batches, time (``paused`` of it spent
    yielding to waiting jobs), and whether it stopped at its time budget with full batches
    still coming (a backlog remains)."""

    evicted: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    seconds: float = 0.0
    paused: float = 0.0
    more: bool = False

    @property
    def rows(self) -> int:
        return sum(self.evicted.values())

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def job_evict_pass(
    *,
    batch: int = 1000,
    budget: float = 1.0,
    busy_share: float | None = None,
    using: str = "default",
) -> EvictionPass:
    """Evict batch after batch while they come back full, for at most ``budget`` seconds.

    A backlog (a retention just shortened, a duty that was down) clears at the database's
    delete rate instead of one batch per duty interval. Each batch commits on its own, so
    the claim path never waits behind more than one small delete.

    While jobs are waiting the pass yields to them: after each full batch it pauses so that
    deleting takes only ``busy_share`` of its time (``HEADGATE["EVICT_BUSY_SHARE"]``, a
    tenth, by default). Deleting a row costs the database about what finishing a job does,
    and a pass deletes faster than workers finish jobs: flat out beside a drain it took
    40-46% of the drain's rate on two cores. With no job waiting there is no one to yield
    to.
    """
    from headgate_django.store.claim import job_available

    share = headgate_settings.EVICT_BUSY_SHARE if busy_share is None else busy_share
    report = EvictionPass()
    started = time.monotonic()
    while True:
        began = time.monotonic()
        counts = job_evict_retained(limit=batch, using=using)
        took = time.monotonic() - began
        report.batches += 1
        for state, n in counts.items():
            report.evicted[state] = report.evicted.get(state, 0) + n
        report.seconds = time.monotonic() - started
        if sum(counts.values()) < batch:
            return report
        if report.seconds >= budget:
            report.more = True
            return report
        if share < 1 and job_available(using=using):
            pause = min(took * (1 - share) / share, budget - report.seconds)
            report.paused += pause
            time.sleep(pause)


def job_eviction_backlog(*, using: str = "default") -> Count:
    """Rows past their retention that eviction has not deleted yet (exact up to
    :data:`~headgate_django.store.estimates.EXACT_UP_TO`, estimated above)."""
    conn = v.connection_for(using)
    where = _evictable_where(conn)
    return capped_count(conn, where, [], mysql_index="headgate_job_evict_my")


#: The unknown kinds' available jobs are each counted no further than this.
UNKNOWN_COUNTED_UP_TO = 10_000
#: At most this many distinct kinds are walked for them.
_KINDS_WALKED = 1_000


def unknown_kinds_waiting(
    known: Sequence[str], *, queues: Sequence[str] | None = None, using: str = "default"
) -> dict[str, int]:
    """Kinds of available jobs that no handler here knows, with their counts (each counted
    no further than :data:`UNKNOWN_COUNTED_UP_TO`).

    ``queues`` limits the answer to the queues a worker serves: a job of another queue is
    not this worker's to run, known kind or not.

    The waiting jobs of known kinds are not read. The kinds in the table are found one at
    a time through the kind index (each the first above the last), and only the jobs of
    kinds not known here are counted. Counting every available job and leaving the known
    kinds out read the whole backlog, once a minute in every worker whose claims came back
    short: behind a rate limit, a million waiting jobs meant a million rows a minute per
    worker.
    """
    conn = v.connection_for(using)
    skip = set(known)
    found: dict[str, int] = {}
    where = "kind = %s AND state = %s"
    if queues:
        where += f" AND queue IN ({v.placeholders(len(queues))})"
    count = f"SELECT COUNT(*) FROM (SELECT 1 FROM headgate_job WHERE {where} LIMIT %s) c"
    with conn.cursor() as cursor:
        for kind in _kinds(cursor):
            if kind in skip:
                continue
            cursor.execute(
                count, [kind, State.AVAILABLE.value, *(queues or ()), UNKNOWN_COUNTED_UP_TO]
            )
            n = int(cursor.fetchone()[0])
            if n:
                found[kind] = n
    return found


def _kinds(cursor: Any) -> list[str]:
    """The distinct kinds in the job table, in order, up to :data:`_KINDS_WALKED`: one
    index probe each, whatever the number of jobs."""
    kinds: list[str] = []
    cursor.execute("SELECT kind FROM headgate_job ORDER BY kind LIMIT 1")
    row = cursor.fetchone()
    while row is not None and len(kinds) < _KINDS_WALKED:
        kinds.append(row[0])
        cursor.execute(
            "SELECT kind FROM headgate_job WHERE kind > %s ORDER BY kind LIMIT 1", [row[0]]
        )
        row = cursor.fetchone()
    return kinds


def job_make_due(*, queues: Sequence[str] | None = None, using: str = "default") -> int:
    """Make every scheduled and retryable job available now, whatever its time.

    For tests only (``headgate_django.testing``): it moves time forward for the queue
    without touching the clock.
    """
    conn = v.connection_for(using)
    where = "state IN (%s, %s)"
    params: list[Any] = [State.SCHEDULED.value, State.RETRYABLE.value]
    if queues:
        where += f" AND queue IN ({v.placeholders(len(queues))})"
        params += list(queues)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, scheduled_at = {v.now(conn)} WHERE {where}",
            [State.AVAILABLE.value, *params],
        )
        return cursor.rowcount

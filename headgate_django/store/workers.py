"""The worker registry and the per-minute outcome counters: cheap writes, bounded reads.

A worker's heartbeat upserts its ``headgate_worker`` row in one statement, and flushes the
outcomes it recorded since its last flush into ``headgate_queue_minute`` in one more
(:func:`queue_minutes_add`). Both run on the heartbeat thread, never on the claim or ack
path, and neither reads ``headgate_job``. The minute is the store clock's, as whole minutes
since the Unix epoch, so workers on hosts with skewed clocks add to the same row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction

from headgate_django.kernel.workers import GONE_AFTER_BEATS, LIVE, minute_series, worker_status
from headgate_django.models import Worker
from headgate_django.store import vendor as v

#: Per-minute rows older than this are deleted by the maintenance duty.
MINUTES_KEPT = 24 * 60

_COUNTERS = ("completed", "failed", "retried")


def epoch_minute(conn: Any) -> str:
    """The store clock's minute, as an integer SQL expression, constant through a statement
    (so that a range on ``minute`` compared with it is bounded by its index)."""
    if conn.vendor == "postgresql":
        return "CAST(FLOOR(EXTRACT(EPOCH FROM statement_timestamp()) / 60) AS BIGINT)"
    if conn.vendor == "mysql":
        return "FLOOR(UNIX_TIMESTAMP() / 60)"
    return "(CAST(strftime('%%s', 'now') AS INTEGER) / 60)"


def _new(conn: Any, column: str) -> str:
    """The value an upsert proposed for ``column``."""
    return f"VALUES({column})" if conn.vendor == "mysql" else f"excluded.{column}"


def _on_conflict(conn: Any, key: str, sets: str) -> str:
    if conn.vendor == "mysql":
        return f" ON DUPLICATE KEY UPDATE {sets}"
    return f" ON CONFLICT ({key}) DO UPDATE SET {sets}"


@dataclass(frozen=True)
class Beat:
    """What one heartbeat says about the worker."""

    worker_id: str
    host: str
    pid: int
    queues: list[str] | None
    concurrency: int
    heartbeat: timedelta
    in_flight: int = 0
    in_flight_by_queue: Mapping[str, int] | None = None
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0


_BEAT_COLUMNS = (
    "id",
    "host",
    "pid",
    "queues",
    "concurrency",
    "in_flight",
    "in_flight_by_queue",
    "claimed",
    "completed",
    "retried",
    "failed",
    "heartbeat_ms",
)
#: Refreshed on every beat; ``started_at`` by :func:`_started`.
_BEAT_REFRESHED = (*_BEAT_COLUMNS[1:], "last_heartbeat_at", "stopped_at")


def _started(conn: Any) -> str:
    """``started_at`` stays while one process beats, and restarts when another process
    reuses the id (a fixed ``--worker-id``) or the worker had stopped. First in the update
    list: MySQL applies its assignments in order, each seeing those before it."""
    old = "headgate_worker"
    return (
        f"started_at = CASE WHEN {old}.pid <> {_new(conn, 'pid')} "
        f"OR {old}.host <> {_new(conn, 'host')} OR {old}.stopped_at IS NOT NULL "
        f"THEN {_new(conn, 'started_at')} ELSE {old}.started_at END"
    )


def worker_heartbeat(beat: Beat, *, stopped: bool = False, using: str = "default") -> None:
    """Insert or refresh the worker's registry row, in one statement; ``stopped`` stamps a
    clean exit. A row the retention dropped meanwhile (a long outage) is inserted again,
    and an id reused by a new process starts over."""
    conn = v.connection_for(using)
    now = v.now(conn)
    values = _beat_values(beat)
    columns = (*_BEAT_COLUMNS, "started_at", "last_heartbeat_at", "stopped_at")
    sets = ", ".join([_started(conn), *(f"{c} = {_new(conn, c)}" for c in _BEAT_REFRESHED)])
    sql = (
        f"INSERT INTO headgate_worker ({', '.join(columns)}) "
        f"VALUES ({v.placeholders(len(values))}, {now}, {now}, {now if stopped else 'NULL'})"
        + _on_conflict(conn, "id", sets)
    )
    with conn.cursor() as cursor:
        cursor.execute(sql, values)


def worker_register(
    beat: Beat, *, dead_pid: int | None = None, using: str = "default"
) -> WorkerView | None:
    """Take ``beat.worker_id`` for a worker about to start, unless a live worker has it:
    then that worker's row, and nothing is written.

    The id is free when no row has it, or its row is stopped, gone (the registry's rule,
    ``kernel.workers``: :data:`GONE_AFTER_BEATS` heartbeats missed), or was written from
    this host by this very process (a worker run again in one process, a container
    restarted as pid 1 under its old host name) or by ``dead_pid``, a process the caller
    found gone from this host. One ``INSERT``, else one ``UPDATE`` whose ``WHERE`` is that
    rule: of two workers starting at once with one id, the second finds the first's row,
    or waits for its lock and then sees its fresh heartbeat and pid, and is refused.
    """
    conn = v.connection_for(using)
    now = v.now(conn)
    values = _beat_values(beat)
    columns = (*_BEAT_COLUMNS, "started_at", "last_heartbeat_at", "stopped_at")
    insert = (
        f"INSERT INTO headgate_worker ({', '.join(columns)}) "
        f"VALUES ({v.placeholders(len(values))}, {now}, {now}, NULL)"
    )
    gone = v.plus_ms(conn, f"-heartbeat_ms * {GONE_AFTER_BEATS}")
    take_over = (
        f"UPDATE headgate_worker SET {', '.join(f'{c} = %s' for c in _BEAT_COLUMNS[1:])}, "
        f"started_at = {now}, last_heartbeat_at = {now}, stopped_at = NULL WHERE id = %s "
        f"AND (stopped_at IS NOT NULL OR last_heartbeat_at < {gone} "
        "OR (host = %s AND pid IN (%s, %s)))"
    )
    ours: list[Any] = [beat.worker_id, beat.host, beat.pid, dead_pid or beat.pid]
    holder = None
    for _ in range(3):  # the row can go (retention) or go stale between two statements
        try:
            with transaction.atomic(using=using), conn.cursor() as cursor:
                cursor.execute(insert, values)
            return None
        except IntegrityError:
            pass  # the id has a row
        with conn.cursor() as cursor:
            cursor.execute(take_over, [*values[1:], *ours])
            if cursor.rowcount:
                return None
        holder = worker_get(beat.worker_id, using=using)
        if holder is not None and holder.status == LIVE:
            return holder
    return holder


def _beat_values(beat: Beat) -> list[Any]:
    """The values of :data:`_BEAT_COLUMNS` for ``beat``, in their order."""
    return [
        beat.worker_id,
        beat.host,
        beat.pid,
        None if beat.queues is None else json.dumps(list(beat.queues)),
        beat.concurrency,
        beat.in_flight,
        json.dumps(dict(beat.in_flight_by_queue or {}), sort_keys=True),
        beat.claimed,
        beat.completed,
        beat.retried,
        beat.failed,
        int(beat.heartbeat.total_seconds() * 1000),
    ]


def queue_minutes_add(
    counts: Mapping[str, tuple[int, int, int]], *, using: str = "default"
) -> None:
    """Add ``{queue: (completed, failed, retried)}`` to the store clock's current minute,
    in one statement however many queues there are."""
    if not counts:
        return
    conn = v.connection_for(using)
    minute = epoch_minute(conn)
    rows = sorted(counts.items())
    one = f"(%s, {minute}, %s, %s, %s)"
    sets = ", ".join(f"{c} = headgate_queue_minute.{c} + {_new(conn, c)}" for c in _COUNTERS)
    sql = (
        f"INSERT INTO headgate_queue_minute (queue, minute, {', '.join(_COUNTERS)}) VALUES "
        + ", ".join([one] * len(rows))
        + _on_conflict(conn, "minute, queue", sets)
    )
    params = [value for queue, numbers in rows for value in (queue, *numbers)]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)


@dataclass
class WorkerView:
    """A registry row as the console and the API show it, with its status."""

    id: str
    host: str
    pid: int
    queues: list[str] | None
    concurrency: int
    in_flight: int
    in_flight_by_queue: dict[str, int]
    claimed: int
    completed: int
    retried: int
    failed: int
    heartbeat_s: float
    started_at: datetime
    last_heartbeat_at: datetime
    stopped_at: datetime | None
    status: str
    heartbeat_age_s: float


_VIEW_FIELDS = (
    *_BEAT_COLUMNS,
    "started_at",
    "last_heartbeat_at",
    "stopped_at",
)


def _view(row: dict[str, Any], now: datetime) -> WorkerView:
    heartbeat = timedelta(milliseconds=row.pop("heartbeat_ms"))
    status = worker_status(
        now=now,
        last_heartbeat_at=row["last_heartbeat_at"],
        heartbeat=heartbeat,
        stopped=row["stopped_at"] is not None,
    )
    age = max(0.0, (now - row["last_heartbeat_at"]).total_seconds())
    return WorkerView(
        **row, heartbeat_s=heartbeat.total_seconds(), status=status, heartbeat_age_s=age
    )


#: The registry is a row per worker process of the last ``WORKER_RETENTION``: a fleet's
#: worth. Reads stop here, so a runaway registry cannot make a page slow.
MAX_WORKERS = 1000


def worker_list(
    *, after: str | None = None, limit: int = MAX_WORKERS, using: str = "default"
) -> list[WorkerView]:
    """Registered workers by id (after ``after``), each with its status on the store clock."""
    now = v.db_now(using)
    qs = Worker.objects.using(using).order_by("id")
    if after is not None:
        qs = qs.filter(id__gt=after)
    return [_view(dict(row), now) for row in qs.values(*_VIEW_FIELDS)[: min(limit, MAX_WORKERS)]]


def worker_get(worker_id: str, *, using: str = "default") -> WorkerView | None:
    row = Worker.objects.using(using).filter(pk=worker_id).values(*_VIEW_FIELDS).first()
    return None if row is None else _view(dict(row), v.db_now(using))


def queue_minutes(
    *, minutes: int = 60, using: str = "default"
) -> tuple[int, dict[str, list[tuple[int, int, int, int]]]]:
    """The store clock's current minute, and per queue the last ``minutes`` minutes'
    ``(minute, completed, failed, retried)``, oldest first, zeros included."""
    conn = v.connection_for(using)
    minute = epoch_minute(conn)
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT {minute}, queue, minute, completed, failed, retried "
            f"FROM headgate_queue_minute WHERE minute > {minute} - %s",
            [minutes],
        )
        rows = cursor.fetchall()
        if not rows:
            cursor.execute(f"SELECT {minute}", [])
            return int(cursor.fetchone()[0]), {}
    current = int(rows[0][0])
    found: dict[str, dict[int, tuple[int, int, int]]] = {}
    for _, queue, m, completed, failed, retried in rows:
        found.setdefault(queue, {})[int(m)] = (int(completed), int(failed), int(retried))
    series = {
        q: minute_series(by_minute, last_minute=current, minutes=minutes)
        for q, by_minute in found.items()
    }
    return current, series


def worker_prune(*, retention: timedelta, using: str = "default") -> dict[str, int]:
    """Delete registry rows whose last heartbeat is older than ``retention`` (gone or
    stopped workers) and per-minute rows older than :data:`MINUTES_KEPT`."""
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM headgate_worker WHERE last_heartbeat_at < {v.cutoff(conn, offset=True)}",
            [-int(retention.total_seconds() * 1000)],
        )
        workers = cursor.rowcount
        cursor.execute(
            f"DELETE FROM headgate_queue_minute WHERE minute <= {epoch_minute(conn)} - %s",
            [MINUTES_KEPT],
        )
        minutes = cursor.rowcount
    return {"workers": workers, "minutes": minutes}

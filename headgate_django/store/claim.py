"""``job_claim``: hand available jobs to one worker, never the same job to two.

PostgreSQL and MySQL/MariaDB lock candidates with ``FOR UPDATE SKIP LOCKED`` so workers
never wait on each other (on PostgreSQL the claim is one statement in autocommit); SQLite serialises writers with ``BEGIN IMMEDIATE`` (the
``transaction_mode`` the settings check asks for). Each claim stamps its jobs with one
fresh ``lease_id`` and bumps every job's ``fence``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.kernel.states import State
from headgate_django.store import vendor as v
from headgate_django.store.admitted import (
    PLAIN_EXCLUDES,
    PLAIN_EXCLUDES_PARAMS,
    Claimer,
    claim_admitted,
    current_policy,
)
from headgate_django.store.fenced import LeaseRef
from headgate_django.store.prepared import server_bound_cursor
from headgate_django.store.rows import RowReader

log = logging.getLogger("headgate_django.store")

_LEASE_PREFIX = 64 - 13  # lease_id column width minus ":" and 12 random hex digits

COLUMNS = (
    "id",
    "kind",
    "queue",
    "payload",
    "schema_version",
    "attempt",
    "crash_attempt",
    "max_attempts",
    "fence",
    "timeout",
    "retention",
    "checkpoint",
    "cp_cursor",
    "workflow_id",
    "rate_class",
    "weight",
    "deadline",
)
# The claim's order, which is also the order a worker starts what it claimed.
_ORDER = "priority DESC, scheduled_at, id"


def _read_back(empty_checkpoint: str) -> str:
    """The claimed columns as a claim reads them back. Most jobs have no checkpoint: an
    empty one comes back as NULL, which the worker need not parse."""
    return ", ".join(
        f"NULLIF(checkpoint, {empty_checkpoint}) AS checkpoint" if c == "checkpoint" else c
        for c in COLUMNS
    )


# PostgreSQL compares the jsonb value; SQLite the stored text, which Django writes as
# ``{}``. Elsewhere the columns are read as they are.
PG_READ_BACK = _read_back("'{}'::jsonb")
_SQLITE_OUTER = _read_back("'{}'")


# Queue and kind lists go to the claim function as one string each (``vendor.pg_list``).
PG_NAMES = v.pg_list("varchar")


def names_param(names: Sequence[str] | None) -> str | None:
    """``names`` as :data:`PG_NAMES` takes them. No stored queue or kind contains the
    separator (``kernel.names``), so a name with it cannot match anything and is left out
    rather than split into names it is not."""
    if names is None:
        return None
    return v.pg_list_param(n for n in names if v.PG_LIST_SEP not in n)


class ClaimedJob(NamedTuple):
    """What a worker needs to run one attempt, and the lease that fences its writes.

    A named tuple rather than a frozen dataclass: a worker makes one per job, and a frozen
    dataclass sets each of its fifteen fields through ``object.__setattr__``, which cost
    more than the rest of reading the claimed row.
    """

    ref: LeaseRef
    kind: str
    queue: str
    payload: bytes
    schema_version: int
    attempt: int
    crash_attempt: int
    max_attempts: int
    timeout: timedelta | None
    retention: timedelta
    checkpoint: dict[str, Any]
    cursor: bytes | None
    workflow_id: str | None
    rate_class: str | None = None
    weight: int = 1
    #: Past it the job is archived (``store.deadlines``); the handler sees it as
    #: ``ctx.deadline``.
    deadline: datetime | None = None


def new_lease_id(worker_id: str) -> str:
    """A fresh lease id. The random tail makes it unique; the worker prefix is only a hint
    for people, so it is cut to keep the id inside the 64-character column (host names run
    long), and loses any control character (``vendor.PG_LIST_SEP`` is one).
    """
    prefix = worker_id[:_LEASE_PREFIX]
    if not prefix.isprintable():
        prefix = "".join(c for c in prefix if c >= " ")
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def job_claim(
    *,
    worker_id: str,
    limit: int,
    lease_ttl: timedelta,
    queues: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    using: str = "default",
) -> list[ClaimedJob]:
    """Claim up to ``limit`` available jobs, highest priority first, then oldest.

    The jobs come back in that order.

    ``queues=None`` serves every queue; ``kinds`` restricts the claim to kinds this worker
    can run, so a job nobody here knows stays untouched for a worker that knows it.
    """
    if limit <= 0 or (kinds is not None and not kinds):
        return []
    conn = v.connection_for(using)
    lease_id = new_lease_id(worker_id)
    ttl_ms = int(lease_ttl.total_seconds() * 1000)
    reader = RowReader.get(conn, COLUMNS)
    policy = current_policy(conn, using)
    if not (policy.governed or policy.classes):  # no policy shapes claims: the plain claim
        jobs = _claim_plain(conn, reader, limit, queues, kinds, lease_id, worker_id, ttl_ms, using)
    else:
        claimer = Claimer(kinds, lease_id, worker_id, ttl_ms, using)
        rows = claim_admitted(conn, policy, queues=queues, limit=limit, claimer=claimer)
        jobs = [_claimed(reader.convert(row), lease_id) for row in rows]
        if len(jobs) < limit:
            jobs += _claim_plain(
                conn, reader, limit - len(jobs), queues, kinds, lease_id, worker_id, ttl_ms, using
            )
    for job in jobs:
        if job.deadline is not None:  # rare: look again only when a job has a deadline
            return _without_expired(jobs, using)
    return jobs


def _without_expired(jobs: list[ClaimedJob], using: str) -> list[ClaimedJob]:
    """``jobs`` less those already past their deadline, which are archived unrun."""
    from headgate_django.store.deadlines import job_expire_claimed

    expired = job_expire_claimed([j.ref for j in jobs if j.deadline is not None], using=using)
    if expired:
        log.info("archived %d claimed job(s) past their deadline: %s", len(expired), expired)
    return [j for j in jobs if j.ref.job_id not in expired]


def _claim_plain(
    conn: BaseDatabaseWrapper,
    reader: RowReader,
    limit: int,
    queues: Sequence[str] | None,
    kinds: Sequence[str] | None,
    lease_id: str,
    worker_id: str,
    ttl_ms: int,
    using: str,
) -> list[ClaimedJob]:
    """The claim of every queue no admission policy governs (and no paused one)."""
    if conn.vendor == "postgresql" and v.has_pg_function(conn, "headgate_claim"):
        # One statement in autocommit, bound on the server (its text is the same for every
        # claim, so it can be prepared): the claim's only round trip, which matters most on
        # the latency path. The function (migration 0010) reads the claim index in order and
        # updates by primary key whatever the planner's statistics say; it returns rows in
        # no order, so they are sorted here.
        with server_bound_cursor(conn) as cursor:
            cursor.execute(
                f"SELECT {PG_READ_BACK} FROM headgate_claim(%s::integer, "
                f"{PG_NAMES}, {PG_NAMES}, %s::varchar, %s::varchar, %s::bigint) "
                f"ORDER BY {_ORDER}",
                [
                    limit,
                    names_param(queues or None),
                    names_param(kinds),
                    lease_id,
                    worker_id[:255],
                    ttl_ms,
                ],
            )
            rows = cursor.fetchall()
        return [_claimed(reader.convert(row), lease_id) for row in rows]
    # Elsewhere (and without the function): the candidates, the update and a sorted read,
    # in the claim's transaction.
    # The state is written into the text, not bound: SQLite uses a partial index only when
    # the query repeats its condition literally.
    where = [f"state = '{State.AVAILABLE.value}'"]
    params: list[Any] = []
    if queues:
        where.append(f"queue IN ({v.placeholders(len(queues))})")
        params.extend(queues)
    if kinds is not None:
        where.append(f"kind IN ({v.placeholders(len(kinds))})")
        params.extend(kinds)
    # Read once per claim (hashed subplans), not probed once per candidate row. What an
    # admission policy governs is claimed by ``store.admitted`` instead.
    where.append(PLAIN_EXCLUDES)
    params += PLAIN_EXCLUDES_PARAMS
    candidates = (
        f"SELECT id FROM headgate_job{v.claim_index_hint(conn, bool(queues))} "
        f"WHERE {' AND '.join(where)} ORDER BY {_ORDER} LIMIT %s{v.skip_locked(conn)}"
    )
    params.append(limit)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(candidates, params)
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return []
        rows = lease_rows(cursor, conn, ids, lease_id=lease_id, worker_id=worker_id, ttl_ms=ttl_ms)
    return [_claimed(reader.convert(row), lease_id) for row in rows]


def lease_rows(
    cursor: Any,
    conn: BaseDatabaseWrapper,
    ids: Sequence[str],
    *,
    lease_id: str,
    worker_id: str,
    ttl_ms: int,
) -> list[Any]:
    """Move the available jobs among ``ids`` to running under ``lease_id``, inside the
    caller's transaction, and read them back in claim order (as :data:`COLUMNS`).

    The caller chose ``ids`` and holds whatever makes its choice safe (row locks, or a
    lock that serialises the claims of their queue); a job that stopped being available
    meanwhile is left out.
    """
    id_list = v.placeholders(len(ids))
    update = (
        f"UPDATE {v.jobs_by_id(conn)} SET state = %s, lease_id = %s, fence = fence + 1, "
        f"claimed_by = %s, claimed_at = {v.now(conn)}, lease_expires_at = {v.plus_ms(conn)} "
        f"WHERE id IN ({id_list}) AND state = %s"
    )
    params = [State.RUNNING.value, lease_id, worker_id[:255], ttl_ms, *ids, State.AVAILABLE.value]
    if conn.vendor == "postgresql":  # one round trip: the update hands its rows to the read
        cursor.execute(
            f"WITH leased AS ({update} RETURNING *) SELECT {PG_READ_BACK} FROM leased "
            f"ORDER BY {_ORDER}",
            params,
        )
        return list(cursor.fetchall())
    cursor.execute(update, params)
    columns = _SQLITE_OUTER if conn.vendor == "sqlite" else ", ".join(COLUMNS)
    cursor.execute(
        f"SELECT {columns} FROM headgate_job WHERE id IN ({id_list}) AND lease_id = %s "
        f"ORDER BY {_ORDER}",
        [*ids, lease_id],
    )
    return list(cursor.fetchall())


def _claimed(row: list[Any], lease_id: str) -> ClaimedJob:
    """A claimed row, its values in :data:`COLUMNS` order, as the job it holds."""
    (
        job_id,
        kind,
        queue,
        payload,
        schema_version,
        attempt,
        crash_attempt,
        max_attempts,
        fence,
        timeout,
        retention,
        checkpoint,
        cursor,
        workflow_id,
        rate_class,
        weight,
        deadline,
    ) = row
    return ClaimedJob(
        LeaseRef(job_id, lease_id, fence),
        kind,
        queue,
        bytes(payload or b""),
        schema_version,
        attempt,
        crash_attempt,
        max_attempts,
        timeout,
        retention,
        checkpoint or {},
        bytes(cursor) if cursor is not None else None,
        workflow_id,
        rate_class,
        weight,
        deadline,
    )


def job_available(queues: Sequence[str] | None = None, *, using: str = "default") -> bool:
    """Whether a claim could find work now: an available job in ``queues`` (all if None).

    One read through the claim index, no lock: what an idle worker's wake source asks
    before it wakes the claim loop (see ``worker.notify``).
    """
    conn = v.connection_for(using)
    sql = "SELECT 1 FROM headgate_job WHERE state = %s"
    params: list[str] = [State.AVAILABLE.value]
    if queues:
        sql += f" AND queue IN ({v.placeholders(len(queues))})"
        params += list(queues)
    with conn.cursor() as cursor:
        cursor.execute(sql + " LIMIT 1", params)
        return cursor.fetchone() is not None

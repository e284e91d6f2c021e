"""Writes a worker makes about a job it holds. Every one is fenced.

A write applies only while the row still says ``state='running'`` under the caller's
``(lease_id, fence)``. Zero rows means the lease was lost (reclaimed, cancelled, or moved
on by an operator): single writes raise :class:`LeaseLostError`; batch writes return the
ids that did land so the caller can tell which handlers to stop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any, NamedTuple

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.conf import headgate_settings
from headgate_django.envelope import check_result
from headgate_django.exceptions import DeadlineExceededError, LeaseLostError, ResultTooLargeError
from headgate_django.kernel import backoff
from headgate_django.kernel.states import Event, State, check, retry_target
from headgate_django.kernel.storable import storable_text
from headgate_django.store import packet
from headgate_django.store import vendor as v
from headgate_django.store.attempt_logs import logged, save_completion_logs
from headgate_django.store.effect_records import PG_DELETE_WITH_GONE, effects_delete_gone
from headgate_django.store.hooks import Death, after_archive
from headgate_django.store.prepared import server_bound_cursor
from headgate_django.store.rows import prep

MAX_ERRORS = 50
#: The characters of an attempt's error message kept in ``errors`` (the traceback keeps
#: its last 16,000); the worker's log line shows the same cut.
MAX_ERROR_CHARS = 4000
_RUNNING = State.RUNNING.value
_CLEAR_LEASE = "lease_id = NULL, lease_expires_at = NULL"


class LeaseRef(NamedTuple):
    """Names one attempt: the job, the claim that leased it, and its fence.

    A worker makes one per job and keys its held jobs by it; as a named tuple it is made
    and hashed in C.
    """

    job_id: str
    lease_id: str
    fence: int


class Completion(NamedTuple):
    """A success to record: one per finished job, batched by the worker's acker."""

    ref: LeaseRef
    result: Any = None
    delete: bool = False  # retention 0: the row goes away at ack
    workflow_id: str | None = None  # a workflow child: its coordinator is woken
    logs: dict[str, Any] | None = None  # what the attempt logged (ctx.log), if anything


def atomic_unless_alone(
    conn: BaseDatabaseWrapper, using: str, *, alone: bool
) -> AbstractContextManager[Any]:
    """``transaction.atomic()``, unless the work is one statement the database makes atomic.

    ``alone`` says the caller runs a single statement and nothing else needs to commit with
    it; then PostgreSQL runs it in autocommit (or in the caller's transaction, if any),
    saving the BEGIN and COMMIT round trips.
    """
    if alone and v.one_statement_is_atomic(conn):
        return nullcontext()
    return transaction.atomic(using=using)


# PostgreSQL: the leases come as three arrays joined on the primary key, so the text is the
# same for any number of jobs (and can be prepared) and each row is found by index,
# where a row-value ``IN (VALUES …)`` was re-parsed per call and planned as a nested loop.
# Each array goes as one string the server splits (``vendor.pg_list``). Job ids hold no
# control characters (``kernel.names``) and lease ids none either (``new_lease_id``), so
# the separator cannot occur inside one.
_PG_REFS = (
    f"unnest({v.pg_list('varchar')}, {v.pg_list('varchar')}, {v.pg_list('bigint')}{{}}) "
    "AS r(ref_id, ref_lease, ref_fence{})"
)
# No ``state = 'running'`` here: a matching ``lease_id`` already means the job is running,
# because the table's CHECK constraint ``headgate_job_running_has_lease`` keeps ``lease_id``
# set exactly while it runs. Spelled out, that condition let the planner read the partial
# lease index (``WHERE state = 'running'``) instead of the primary key, and its statistics
# are usually from a moment when nothing ran: an ack of 100 then joined every running job
# with every lease (20,000 comparisons with 200 running), or hashed them all after planning
# the statement afresh each time.
_PG_HELD = "id = r.ref_id AND lease_id = r.ref_lease AND fence = r.ref_fence"


def _pg_refs(refs: Sequence[LeaseRef]) -> list[str]:
    return [
        v.pg_list_param([r.job_id for r in refs]),
        v.pg_list_param([r.lease_id for r in refs]),
        v.pg_list_param([str(r.fence) for r in refs]),
    ]


def _fenced_ids(
    cursor: Any,
    conn: BaseDatabaseWrapper,
    set_sql: str,
    set_params: list[Any],
    refs: Sequence[LeaseRef],
    results: list[Any] | None = None,
) -> set[str]:
    """Apply ``SET set_sql`` to the rows still held under ``refs``; return their ids.

    ``results`` (PostgreSQL only, one per ref, ``None`` to keep the column) is exposed to
    ``set_sql`` as ``r.ref_result``.
    """
    if not refs:
        return set()
    if conn.vendor == "postgresql":
        source = (
            _PG_REFS.format(", %b::jsonb[]", ", ref_result") if results else _PG_REFS.format("", "")
        )
        cursor.execute(
            f"UPDATE headgate_job SET {set_sql} FROM {source} WHERE {_PG_HELD} RETURNING id",
            [*set_params, *_pg_refs(refs), *([results] if results else [])],
        )
        return {row[0] for row in cursor.fetchall()}
    if v.has_returning(conn):
        cursor.execute(
            f"UPDATE headgate_job SET {set_sql} WHERE state = %s AND "
            f"(id, lease_id, fence) IN ({v.row_values(len(refs), 3)}) RETURNING id",
            [*set_params, _RUNNING, *v.flat((r.job_id, r.lease_id, r.fence) for r in refs)],
        )
        return {row[0] for row in cursor.fetchall()}
    held = _lock_held(cursor, conn, refs)
    if held:
        cursor.execute(
            f"UPDATE headgate_job SET {set_sql} WHERE id IN ({v.placeholders(len(held))})",
            [*set_params, *held],
        )
    return held


def _lock_held(cursor: Any, conn: BaseDatabaseWrapper, refs: Sequence[LeaseRef]) -> set[str]:
    wanted = {r.job_id: (r.lease_id, r.fence) for r in refs}
    cursor.execute(
        f"SELECT id, lease_id, fence FROM {v.jobs_by_id(conn)} WHERE state = %s "
        f"AND id IN ({v.placeholders(len(wanted))}){v.for_update(conn)}",
        [_RUNNING, *wanted],
    )
    return {row[0] for row in cursor.fetchall() if wanted.get(row[0]) == (row[1], row[2])}


def _deleted_ids(cursor: Any, conn: BaseDatabaseWrapper, refs: Sequence[LeaseRef]) -> set[str]:
    """Delete the jobs still held under ``refs``, with their effect records; their ids.

    On PostgreSQL one statement does both, so that a delete at ack can still run alone in
    autocommit (see :func:`atomic_unless_alone`)."""
    if not refs:
        return set()
    if conn.vendor == "postgresql":
        cursor.execute(
            f"WITH gone AS (DELETE FROM headgate_job USING {_PG_REFS.format('', '')} "
            f"WHERE {_PG_HELD} RETURNING id), {PG_DELETE_WITH_GONE} SELECT id FROM gone",
            _pg_refs(refs),
        )
        return {row[0] for row in cursor.fetchall()}
    if v.has_returning(conn):
        cursor.execute(
            f"DELETE FROM headgate_job WHERE state = %s AND "
            f"(id, lease_id, fence) IN ({v.row_values(len(refs), 3)}) RETURNING id",
            [_RUNNING, *v.flat((r.job_id, r.lease_id, r.fence) for r in refs)],
        )
        held = {row[0] for row in cursor.fetchall()}
    else:
        held = _lock_held(cursor, conn, refs)
        if held:
            cursor.execute(
                f"DELETE FROM headgate_job WHERE id IN ({v.placeholders(len(held))})", list(held)
            )
    effects_delete_gone(cursor, held)
    return held


def job_complete_many(completions: Sequence[Completion], *, using: str = "default") -> set[str]:
    """Record successes; return the ids whose completion landed.

    One transaction for all of them, except that a single statement with no ``ON_FINISH``
    hook to run (no completion belongs to a workflow) runs in autocommit where the database
    makes one statement atomic.
    """
    if not completions:
        return set()
    conn = v.connection_for(using)
    deletes = [c.ref for c in completions if c.delete]
    keeps = [c for c in completions if not c.delete]
    alone = not (deletes and keeps) and not any(c.workflow_id or c.logs for c in completions)
    done: set[str] = set()
    with atomic_unless_alone(conn, using, alone=alone), server_bound_cursor(conn) as cursor:
        if not alone:
            save_completion_logs(cursor, conn, keeps)
        done |= _deleted_ids(cursor, conn, deletes)
        if keeps:
            done |= _complete_kept(cursor, conn, keeps)
        after_finish(
            cursor,
            conn,
            {c.ref.job_id: c.workflow_id for c in completions if c.ref.job_id in done},
        )
    return done


def _complete_kept(cursor: Any, conn: BaseDatabaseWrapper, keeps: list[Completion]) -> set[str]:
    set_sql = (
        f"state = %s, finalized_at = {v.now(conn)}, "
        f"expires_at = {v.plus_duration_column(conn, 'retention')}, {_CLEAR_LEASE}"
    )
    params: list[Any] = [State.COMPLETED.value]
    refs = [c.ref for c in keeps]
    with_result = [c for c in keeps if c.result is not None]
    if not with_result:
        return _fenced_ids(cursor, conn, set_sql, params, refs)
    if conn.vendor == "postgresql":
        results = [
            None if c.result is None else _result_param(conn, c.ref.job_id, c.result) for c in keeps
        ]
        set_sql += ", result = coalesce(r.ref_result, result)"
        return _fenced_ids(cursor, conn, set_sql, params, refs, results)
    prepared = [(c, _result_param(conn, c.ref.job_id, c.result)) for c in with_result]
    budget = packet.value_budget(conn)
    # MySQL/MariaDB: the results written together must fit one statement (max_allowed_packet),
    # so they are split into statements that do; the jobs without a result go with the first.
    # A job's id is in the statement twice (its CASE and its IN), quoted, with a few words.
    groups = (
        [prepared]
        if budget is None
        else packet.statements(
            prepared,
            lambda item: packet.sent_size(item[1]) + 2 * len(item[0].ref.job_id.encode()) + 32,
            budget,
        )
    )
    rest = _refs_without_result(keeps)
    done: set[str] = set()
    for group in groups:
        done |= _complete_with_results(cursor, conn, set_sql, params, group, rest)
        rest = []
    return done


def _refs_without_result(keeps: list[Completion]) -> list[LeaseRef]:
    return [c.ref for c in keeps if c.result is None]


def _complete_with_results(
    cursor: Any,
    conn: BaseDatabaseWrapper,
    set_sql: str,
    params: list[Any],
    prepared: list[tuple[Completion, Any]],
    others: list[LeaseRef],
) -> set[str]:
    """Complete the jobs of ``prepared`` with their results, and ``others`` without."""
    cases = " ".join("WHEN %s THEN %s" for _ in prepared)
    values = v.flat((c.ref.job_id, param) for c, param in prepared)
    refs = [c.ref for c, _ in prepared] + others
    return _fenced_ids(
        cursor,
        conn,
        f"{set_sql}, result = CASE id {cases} ELSE result END",
        [*params, *values],
        refs,
    )


def _result_param(conn: BaseDatabaseWrapper, job_id: str, result: Any) -> Any:
    """``result`` as a parameter, refused by the worker's own rule (:func:`check_result`).

    Measured as UTF-8 JSON rather than on the prepared value, which is a ``str`` on SQLite
    and MySQL but a ``Jsonb`` wrapper on PostgreSQL (where the limit went unchecked).
    """
    try:
        check_result(result)
        param = prep(conn, "result", result)
        packet.check_param_sent(conn, param)
    except ResultTooLargeError as exc:
        raise ResultTooLargeError(f"job {job_id}: {exc}", **exc.details) from None
    return param


def after_finish(
    cursor: Any, conn: BaseDatabaseWrapper, finished: Mapping[str, str | None]
) -> None:
    """Hooks that must commit with finished jobs, given as ``{job id: workflow id}``
    (workflows wake their coordinator; a finished coordinator wakes its parents' links)."""
    from headgate_django.store import hooks

    jobs = {job_id: w for job_id, w in finished.items() if w}
    if jobs:
        workflow_ids = set(jobs.values())
        for hook in hooks.ON_FINISH:
            hook(cursor, conn, workflow_ids, set(jobs))


def job_renew_leases(
    refs: Sequence[LeaseRef], *, lease_ttl: timedelta, using: str = "default"
) -> set[str]:
    """Extend the leases still held, waiting for rows another transaction holds; return
    the ids whose lease was lost."""
    if not refs:
        return set()
    conn = v.connection_for(using)
    ttl_ms = int(lease_ttl.total_seconds() * 1000)
    # Not in autocommit, even on PostgreSQL: the rows are locked in id order first (see
    # _lock_in_id_order), and a renewal is off the hot path (once per lease/3 per worker).
    with transaction.atomic(using=using), server_bound_cursor(conn) as cursor:
        _lock_in_id_order(cursor, conn, refs)
        kept = _renew_locked(cursor, conn, refs, ttl_ms)
    return {r.job_id for r in refs} - kept


class Renewal(NamedTuple):
    """What :func:`job_renew_free_leases` did: the ids whose lease was lost, and the refs
    whose rows another transaction held (neither renewed nor lost)."""

    lost: set[str]
    locked: list[LeaseRef]


def job_renew_free_leases(
    refs: Sequence[LeaseRef], *, lease_ttl: timedelta, using: str = "default"
) -> Renewal:
    """Extend the leases still held on the rows no other transaction holds, never waiting.

    A handler inside ``ctx.once`` holds its job's row for as long as its function runs,
    and a workflow pass holds an eager Operation's job while it replays with its outcome.
    A renewal that waited for such a row would leave the worker's other leases unrenewed
    meanwhile: they would lapse under a live worker, and the reclaim duty would run their
    jobs a second time. The rows skipped here cannot be reclaimed while they are held (the
    reclaim skips locked rows); the worker renews them with :func:`job_renew_leases`, one
    at a time, apart from this renewal, so each is renewed as soon as its holder commits.
    """
    if not refs:
        return Renewal(set(), [])
    conn = v.connection_for(using)
    if not v.for_update(conn):  # SQLite: one writer at a time, no row is held by another
        return Renewal(job_renew_leases(refs, lease_ttl=lease_ttl, using=using), [])
    ttl_ms = int(lease_ttl.total_seconds() * 1000)
    ids = sorted({r.job_id for r in refs})
    with transaction.atomic(using=using), server_bound_cursor(conn) as cursor:
        cursor.execute(
            f"SELECT id FROM headgate_job WHERE id IN ({v.placeholders(len(ids))}) ORDER BY id"
            f"{v.skip_locked(conn)}",
            ids,
        )
        free = {row[0] for row in cursor.fetchall()}
        renewing = [r for r in refs if r.job_id in free]
        kept = _renew_locked(cursor, conn, renewing, ttl_ms) if renewing else set()
    # A row not returned is held by another transaction, or gone; the renewal that waits
    # for it tells which.
    return Renewal(free - kept, [r for r in refs if r.job_id not in free])


def _renew_locked(
    cursor: Any, conn: BaseDatabaseWrapper, refs: Sequence[LeaseRef], ttl_ms: int
) -> set[str]:
    """Renew the rows of ``refs`` this transaction has locked; the ids still held."""
    kept = _fenced_ids(cursor, conn, f"lease_expires_at = {v.plus_ms(conn)}", [ttl_ms], refs)
    # A job past its deadline is archived now, and its handler told to stop as if its
    # lease were lost.
    from headgate_django.store.deadlines import archive_held_past_deadline

    return kept - archive_held_past_deadline(cursor, conn, [r for r in refs if r.job_id in kept])


def _lock_in_id_order(cursor: Any, conn: BaseDatabaseWrapper, refs: Sequence[LeaseRef]) -> None:
    """Lock the rows of ``refs`` in id order before a batch writes them.

    A batch renewal can hold a durable execution's workflow task and its Operation job at
    once (an Operation run on the pass's thread). Recording that Operation's outcome locks
    its job, then the header, then the task; a renewal that locked the task first and then
    waited for the Operation's row would deadlock with it. An Operation job's id
    (``<execution>:op:<n>``) sorts before its task's (``<execution>:task``), so in id order
    the renewal never holds the task while it waits for the Operation.
    """
    if not v.for_update(conn):
        return  # SQLite: one writer at a time, nothing to order
    ids = sorted({r.job_id for r in refs})
    cursor.execute(
        f"SELECT id FROM headgate_job WHERE id IN ({v.placeholders(len(ids))}) ORDER BY id"
        f"{v.for_update(conn)}",
        ids,
    )


def job_release_many(refs: Sequence[LeaseRef], *, using: str = "default") -> set[str]:
    """Give jobs back without charging anything (graceful shutdown leftovers)."""
    if not refs:
        return set()
    conn = v.connection_for(using)
    with atomic_unless_alone(conn, using, alone=True), server_bound_cursor(conn) as cursor:
        return _fenced_ids(
            cursor, conn, f"state = %s, {_CLEAR_LEASE}", [State.AVAILABLE.value], refs
        )


def lock_held(
    cursor: Any, conn: BaseDatabaseWrapper, ref: LeaseRef, columns: str
) -> tuple[Any, ...]:
    cursor.execute(
        f"SELECT {columns}, {v.now(conn)} FROM headgate_job WHERE id = %s AND lease_id = %s "
        f"AND fence = %s AND state = %s{v.for_update(conn)}",
        [ref.job_id, ref.lease_id, ref.fence, _RUNNING],
    )
    row = cursor.fetchone()
    if row is None:
        raise LeaseLostError(f"lease on job {ref.job_id} was lost (fence {ref.fence})")
    return row


def error_entry(
    conn: BaseDatabaseWrapper,
    at: Any,
    attempt: int,
    kind: str,
    message: str,
    trace: str | None,
    *,
    claimed_at: Any = None,
    worker: str | None = None,
) -> dict[str, Any]:
    """One attempt's record in ``errors``; with when it was claimed and by which worker
    where the caller knows (the console draws attempts as a timeline from these)."""
    entry: dict[str, Any] = {
        "attempt": attempt,
        "at": v.parse_instant(conn, at).isoformat(),
        "kind": kind,
        "error": storable_text(message[:MAX_ERROR_CHARS]),
    }
    if claimed_at is not None:
        entry["claimed_at"] = v.parse_instant(conn, claimed_at).isoformat()
    if worker:
        entry["worker"] = worker
    if trace:
        entry["traceback"] = storable_text(trace[-16000:])
    return entry


def append_error(errors: Any, entry: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(errors, str | bytes):
        errors = json.loads(errors)
    return ([*list(errors or []), entry])[-MAX_ERRORS:]


def job_retry(
    ref: LeaseRef,
    *,
    error: str,
    traceback: str | None = None,
    delay: timedelta | None = None,
    exception: str | None = None,
    logs: dict[str, Any] | None = None,
    using: str = "default",
) -> State:
    """A returned failure: consume an attempt, back off on the store clock or archive.
    ``logs`` (what the attempt logged) is saved with it."""
    conn = v.connection_for(using)
    s = headgate_settings
    with transaction.atomic(using=using), conn.cursor() as cursor:
        columns = "errors, attempt, max_attempts, workflow_id, claimed_at, claimed_by, kind, queue"
        row = lock_held(cursor, conn, ref, columns + (", logs" if logs else ""))
        errors, attempt, max_attempts, workflow_id, claimed, worker, kind, queue = row[:8]
        at = row[-1]
        target = retry_target(attempt, max_attempts)
        entry = error_entry(
            conn, at, attempt + 1, "error", error, traceback, claimed_at=claimed, worker=worker
        )
        if exception:
            entry["exception"] = exception
        params: list[Any] = [target.value, prep(conn, "errors", append_error(errors, entry))]
        if target is State.RETRYABLE:
            delay_ms = (
                int(delay.total_seconds() * 1000)
                if delay is not None
                else backoff.retry_delay_ms(
                    attempt,
                    base_ms=int(s.BACKOFF_BASE.total_seconds() * 1000),
                    cap_ms=int(s.BACKOFF_CAP.total_seconds() * 1000),
                )
            )
            when = f"scheduled_at = {v.plus_ms(conn)}"
            params.append(delay_ms)
        else:
            when = (
                f"finalized_at = {v.now(conn)}, "
                f"expires_at = {v.plus_duration_column(conn, 'retention')}"
            )
        if logs:
            when += ", logs = %s"
            params.append(logged(conn, row[8], logs, "error", at))
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, errors = %s, attempt = attempt + 1, "
            f"{when}, {_CLEAR_LEASE} WHERE id = %s",
            [*params, ref.job_id],
        )
        after_finish(cursor, conn, {ref.job_id: workflow_id})
        if target is State.ARCHIVED:
            death = Death(ref.job_id, kind, queue, "attempts_exhausted", entry["error"])
            after_archive(cursor, conn, [death])
    return target


def _finish_with(
    ref: LeaseRef,
    *,
    state: State,
    kind: str,
    message: str,
    trace: str | None,
    logs: dict[str, Any] | None,
    using: str,
) -> None:
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        columns = "errors, attempt, workflow_id, claimed_at, claimed_by, kind, queue"
        row = lock_held(cursor, conn, ref, columns + (", logs" if logs else ""))
        errors, attempt, workflow_id, claimed, worker, job_kind, queue = row[:7]
        at = row[-1]
        entry = error_entry(
            conn, at, attempt + 1, kind, message, trace, claimed_at=claimed, worker=worker
        )
        params = [state.value, prep(conn, "errors", append_error(errors, entry))]
        also = ""
        if logs:
            also = ", logs = %s"
            params.append(logged(conn, row[7], logs, kind, at))
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, errors = %s, finalized_at = {v.now(conn)}, "
            f"expires_at = {v.plus_duration_column(conn, 'retention')}, {_CLEAR_LEASE}{also} "
            "WHERE id = %s",
            [*params, ref.job_id],
        )
        after_finish(cursor, conn, {ref.job_id: workflow_id})
        reason = "skipped" if state is State.ARCHIVED else "undecodable"
        after_archive(cursor, conn, [Death(ref.job_id, job_kind, queue, reason, entry["error"])])


def job_skip(
    ref: LeaseRef, *, reason: str, logs: dict[str, Any] | None = None, using: str = "default"
) -> None:
    """The handler gave up on purpose: archive without retrying."""
    _finish_with(
        ref,
        state=State.ARCHIVED,
        kind="skip",
        message=reason,
        trace=None,
        logs=logs,
        using=using,
    )


def job_revoke(ref: LeaseRef, *, reason: str, using: str = "default") -> State:
    """The handler withdrew its job: delete the row (``revoke``: running → deleted).

    A workflow node is archived instead (as :func:`job_skip` would), because its workflow
    needs the node's outcome; returns the state the job ended in.
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        workflow_id, _ = lock_held(cursor, conn, ref, "workflow_id")
        if workflow_id is None:
            check(State.RUNNING, Event.REVOKE)
            cursor.execute("DELETE FROM headgate_job WHERE id = %s", [ref.job_id])
            effects_delete_gone(cursor, [ref.job_id])
            return State.DELETED
    job_skip(ref, reason=f"revoked: {reason}", using=using)
    return State.ARCHIVED


def job_mark_undecodable(
    ref: LeaseRef,
    *,
    reason: str,
    traceback: str | None = None,
    logs: dict[str, Any] | None = None,
    using: str = "default",
) -> None:
    """No decoder for the stored payload: park it for an operator, never retry blindly."""
    _finish_with(
        ref,
        state=State.UNDECODABLE,
        kind="undecodable",
        message=reason,
        trace=traceback,
        logs=logs,
        using=using,
    )


def job_snooze(ref: LeaseRef, *, delay: timedelta, using: str = "default") -> None:
    """Run again after ``delay`` (store clock) without consuming an attempt."""
    conn = v.connection_for(using)
    with atomic_unless_alone(conn, using, alone=True), conn.cursor() as cursor:
        held = _fenced_ids(
            cursor,
            conn,
            # A wake-up that arrived while the job ran (a workflow child finishing while its
            # coordinator ticks) moved scheduled_at past claimed_at: honour it, run again now.
            "state = CASE WHEN scheduled_at > claimed_at THEN %s ELSE %s END, "
            f"scheduled_at = CASE WHEN scheduled_at > claimed_at THEN {v.now(conn)} "
            f"ELSE {v.plus_ms(conn)} END, {_CLEAR_LEASE}",
            [State.AVAILABLE.value, State.SCHEDULED.value, int(delay.total_seconds() * 1000)],
            [ref],
        )
    if not held:
        raise LeaseLostError(f"lease on job {ref.job_id} was lost (fence {ref.fence})")


def _fenced_single(ref: LeaseRef, set_sql: str, params: list[Any], using: str) -> None:
    """One fenced ``UPDATE`` of the held row; :class:`LeaseLostError` if it matched none.

    A job past its deadline matches none either: it is archived then, and the error is
    ``DeadlineExceededError``."""
    conn = v.connection_for(using)
    with atomic_unless_alone(conn, using, alone=True), conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE headgate_job SET {set_sql} WHERE id = %s AND lease_id = %s AND fence = %s "
            f"AND state = %s AND (deadline IS NULL OR deadline > {v.now(conn)})",
            [*params, ref.job_id, ref.lease_id, ref.fence, _RUNNING],
        )
        if cursor.rowcount == 1:
            return
    from headgate_django.store.deadlines import archive_held_past_deadline

    with transaction.atomic(using=using), conn.cursor() as cursor:
        archived = archive_held_past_deadline(cursor, conn, [ref])
    if archived:  # raised once the archive is committed, not inside its transaction
        raise DeadlineExceededError(f"job {ref.job_id} passed its deadline and was archived")
    raise LeaseLostError(f"lease on job {ref.job_id} was lost (fence {ref.fence})")


def job_save_checkpoint(
    ref: LeaseRef, checkpoint: dict[str, Any], *, using: str = "default"
) -> None:
    conn = v.connection_for(using)
    _fenced_single(ref, "checkpoint = %s", [prep(conn, "checkpoint", checkpoint)], using)


def job_set_cursor(
    ref: LeaseRef, cursor_value: bytes | None, checkpoint: dict[str, Any], *, using: str = "default"
) -> None:
    """Store a cursor step's position together with the checkpoint that names the step."""
    conn = v.connection_for(using)
    _fenced_single(
        ref,
        "cp_cursor = %s, checkpoint = %s",
        [prep(conn, "cp_cursor", cursor_value), prep(conn, "checkpoint", checkpoint)],
        using,
    )


def job_save_progress(ref: LeaseRef, progress: dict[str, Any], *, using: str = "default") -> None:
    conn = v.connection_for(using)
    _fenced_single(ref, "progress = %s", [prep(conn, "progress", progress)], using)


def job_save_result(ref: LeaseRef, result: Any, *, using: str = "default") -> None:
    """A mid-run result (the final one is written with the completion)."""
    conn = v.connection_for(using)
    _fenced_single(ref, "result = %s", [_result_param(conn, ref.job_id, result)], using)

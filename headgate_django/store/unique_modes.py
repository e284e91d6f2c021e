"""Enqueues that take more than a plain insert: the uniqueness modes and deadlines.

Beside the lifecycle key (held while the job is live, :mod:`.unique_keys`) a key can be

- *throttled* (``unique_window``): held in ``headgate_unique_window`` until the window ends
  on the store clock, whatever becomes of the job; an enqueue of the key first deletes the
  key's lapsed row, so release is lazy (the eviction duty sweeps what nobody asks for);
- *replaced on conflict* (``unique_replace``): the live holder, if it is still waiting
  (scheduled, available or retryable), takes the named values of the new envelope;
- *debounced* (``unique_debounce``): the job runs that long after the last enqueue of its
  key (trailing edge): a conflict gives the waiting holder the new payload and pushes its
  run time forward.

Replace and debounce change one holder, so they are single-job enqueues: a batch with
either is refused before anything is written. Everything here runs in one transaction
(the caller's, when there is one), so a refusal leaves nothing behind. Plain enqueues never
come here: :func:`headgate_django.store.insert.job_insert_many` sends only envelopes with
a mode or a deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope
from headgate_django.exceptions import BatchError, DefinitionError, DuplicateError
from headgate_django.kernel.states import TERMINAL_STATES, Event, State, check
from headgate_django.store import vendor as v
from headgate_django.store.insert import (
    _classify,
    _plan,
    _Planner,
    _Row,
    _sealed,
    insert_checked,
    is_special,
    job_insert_many,
)
from headgate_django.store.rows import prep
from headgate_django.store.unique_keys import live_holders


class Inserted(NamedTuple):
    """What one enqueue did: the id of the job that will run, and whether that is an
    earlier holder of the unique key that took the new values (replace, debounce)."""

    id: str
    replaced: bool


def job_insert_one(env: Envelope, *, using: str = "default") -> Inserted:
    """Enqueue one envelope and say whether it replaced a waiting holder of its key.

    Like ``job_insert_many([env])`` (which returns the holder's id too), for callers that
    must tell a new job from a replaced one (the HTTP enqueue answers 201 or 200)."""
    rows = _plan([env])
    if not is_special(rows[0].env):
        return Inserted(job_insert_many([env], using=using)[0], False)
    if headgate_settings.ENCRYPTION_KEY_ID is not None:
        # Sealed as ``job_insert_many`` seals: the new job's payload, or the holder's new one.
        rows = [_sealed(row) for row in rows]
    return insert_special(v.connection_for(using), rows, using)[0]


def insert_special(conn: BaseDatabaseWrapper, rows: Sequence[_Row], using: str) -> list[Inserted]:
    """Insert ``rows``, some of which have a uniqueness mode or a deadline, all or none."""
    modes = {r.env.unique_mode for r in rows}
    for r in rows:
        if r.env.unique_mode is not None and r.env.unique_key is None:
            raise DefinitionError(
                f"{r.env.kind}: uniqueness mode {r.env.unique_mode!r} needs a unique_key"
            )
    if len(rows) > 1 and modes & {"replace", "debounce"}:
        raise BatchError(
            "unique_replace and unique_debounce change one waiting holder: enqueue such a "
            "job on its own, not in a batch"
        )
    with transaction.atomic(using=using):
        if len(rows) == 1 and rows[0].env.unique_mode in ("replace", "debounce"):
            done = [_replace_or_insert(conn, rows[0], using)]
        else:
            gone = _hold_windows(conn, [r for r in rows if r.env.unique_mode == "throttle"])
            new = [_plain(r) for r in rows if r.id not in gone]
            if new:
                insert_checked(conn, _Planner.of(new), using)
            done = [Inserted(r.id, False) for r in rows]
        _set_deadlines(conn, [r for r, d in zip(rows, done, strict=True) if not d.replaced])
    return done


def _plain(row: _Row) -> _Row:
    """The row as the plain insert writes it: a throttled key lives in its window's row,
    not in the job's ``unique_key`` (which would hold it for the job's lifetime too); a
    debounced job's first run is the debounce from now."""
    env = row.env
    if env.unique_mode == "throttle":
        env = dataclasses.replace(env, unique_key=None, unique_window=None)
    elif env.unique_mode == "debounce":
        env = dataclasses.replace(env, delay=env.unique_debounce, unique_debounce=None)
    elif env.unique_mode == "replace":
        env = dataclasses.replace(env, unique_replace=None)
    return row._replace(env=env)


# -- throttle -------------------------------------------------------------------------


def _hold_windows(conn: BaseDatabaseWrapper, rows: list[_Row]) -> set[str]:
    """Take each row's throttled key for its window, or raise :class:`DuplicateError`.

    A lapsed window is deleted first. The same caller id enqueued again finds its own
    window: the plain insert then decides (an idempotent repeat, or an id conflict), unless
    the job's row is gone (deleted at its ack, or evicted) while its window holds: that
    repeat is idempotent too, and its id is returned, for the caller not to insert it (a
    new row would run the job a second time in the window).
    """
    if not rows:
        return set()
    keys = [r.env.unique_key for r in rows]
    marks = v.placeholders(len(keys))
    with conn.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM headgate_unique_window WHERE unique_key IN ({marks}) "
            f"AND expires_at <= {v.now(conn)}",
            keys,
        )
        held = _window_holders(cursor, conn, keys)
        fresh = []
        for r in rows:
            holder = held.get(r.env.unique_key or "")
            if holder is None:
                fresh.append(r)
            elif holder != r.id:
                raise _duplicate(holder, r.env.unique_key, "holds it for its throttle window")
        gone = _rows_gone(cursor, [r.id for r in rows if held.get(r.env.unique_key or "")])
        if not fresh:
            return gone
        values = ", ".join(f"(%s, %s, {v.plus_ms(conn)})" for _ in fresh)
        params = v.flat((r.env.unique_key, r.id, _ms(r.env.unique_window)) for r in fresh)
        try:
            with transaction.atomic(using=conn.alias):
                cursor.execute(
                    f"INSERT INTO headgate_unique_window (unique_key, job_id, expires_at) VALUES {values}",
                    params,
                )
        except IntegrityError:
            # A concurrent enqueue took a key between our read and our insert: name it.
            # One that took it for this same job id is what the read would have found a
            # moment later: the plain insert then decides (an idempotent repeat, or an
            # id conflict), as above.
            taken = _window_holders(cursor, conn, [r.env.unique_key for r in fresh])
            for r in fresh:
                holder = taken.get(r.env.unique_key or "")
                if holder is not None and holder != r.id:
                    reason = "holds it for its throttle window"
                    raise _duplicate(holder, r.env.unique_key, reason) from None
            left = [r for r in fresh if r.env.unique_key not in taken]
            if len(left) == len(fresh):
                raise
            gone |= _rows_gone(cursor, [r.id for r in fresh if r.env.unique_key in taken])
            gone |= _hold_windows(conn, left)
    return gone


def _rows_gone(cursor: Any, ids: list[str]) -> set[str]:
    """Those of ``ids`` (each holding its own key's window) that have no job row."""
    if not ids:
        return set()
    cursor.execute(f"SELECT id FROM headgate_job WHERE id IN ({v.placeholders(len(ids))})", ids)
    return set(ids) - {row[0] for row in cursor.fetchall()}


def _window_holders(cursor: Any, conn: BaseDatabaseWrapper, keys: list[Any]) -> dict[str, str]:
    cursor.execute(
        f"SELECT unique_key, job_id FROM headgate_unique_window WHERE unique_key IN "
        f"({v.placeholders(len(keys))}){v.for_update(conn)}",
        keys,
    )
    return {key: job_id for key, job_id in cursor.fetchall()}


def unique_window_evict(*, limit: int = 1000, using: str = "default") -> int:
    """Delete up to ``limit`` lapsed throttle windows nobody enqueued again; their number."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT unique_key FROM headgate_unique_window WHERE expires_at <= {v.now(conn)} "
            f"ORDER BY expires_at LIMIT %s{v.skip_locked(conn)}",
            [limit],
        )
        keys = [row[0] for row in cursor.fetchall()]
        if keys:
            cursor.execute(
                f"DELETE FROM headgate_unique_window WHERE unique_key IN ({v.placeholders(len(keys))}) "
                f"AND expires_at <= {v.now(conn)}",
                keys,
            )
    return len(keys)


# -- replace on conflict, debounce ------------------------------------------------------

#: The holder states that may take new values.
_TAKES_OVER = frozenset({State.SCHEDULED, State.AVAILABLE, State.RETRYABLE})


def _replace_or_insert(conn: BaseDatabaseWrapper, row: _Row, using: str) -> Inserted:
    """Insert the job, or give its key's waiting holder the new values.

    An enqueue of the same key that committed between the look for a holder and the
    insert fails the insert with :class:`DuplicateError`: that job is the holder this
    enqueue would have found a moment later, so it takes the new values all the same (a
    burst of debounced enqueues from several processes is what debounce is for).
    """
    key = row.env.unique_key
    assert key is not None  # check_unique_mode requires one
    holders = live_holders(conn, [key])
    if holders and holders[0][0] != row.id:
        holder_id = holders[0][0]
        try:
            _classify(conn, [row])  # quarantine and caller id come first
        except DuplicateError:
            if _take_over(conn, row, holder_id):
                return Inserted(holder_id, True)
    try:
        insert_checked(conn, _Planner.of([_plain(row)]), using)
    except DuplicateError as exc:  # lost the race for the key; quarantine and id passed
        if exc.existing_id != row.id and _take_over(conn, row, exc.existing_id):
            return Inserted(exc.existing_id, True)
        raise
    return Inserted(row.id, False)


def _take_over(conn: BaseDatabaseWrapper, row: _Row, holder_id: str) -> bool:
    """Write the new values into the holder (locked first); False if it finished meanwhile
    (the key is free); :class:`DuplicateError` for a holder that is running or pending, or
    of another kind."""
    env = row.env
    event = Event.DEBOUNCE if env.unique_mode == "debounce" else Event.UNIQUE_REPLACE
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT state, kind FROM headgate_job WHERE id = %s{v.for_update(conn)}",
            [holder_id],
        )
        found = cursor.fetchone()
        state = State(found[0]) if found else None
        if state is None or state in TERMINAL_STATES:
            return False
        if found[1] != env.kind:
            # Its handler would run this kind's payload: a key is one namespace for all kinds.
            raise _duplicate(
                holder_id, env.unique_key, f"is a job of kind {found[1]!r}, not {env.kind!r}"
            )
        if state not in _TAKES_OVER:
            raise _duplicate(
                holder_id,
                env.unique_key,
                f"is {state.value}; only a scheduled, available or retryable holder takes "
                "new values",
            )
        check(state, event)
        sets, params = _new_values(conn, row, state)
        if sets:  # a run time offered to a holder that is not scheduled changes nothing
            cursor.execute(
                f"UPDATE headgate_job SET {', '.join(sets)} WHERE id = %s", [*params, holder_id]
            )
    return True


def _new_values(conn: BaseDatabaseWrapper, row: _Row, state: State) -> tuple[list[str], list[Any]]:
    """The ``SET`` terms (and their parameters) that give a holder in ``state`` the row's
    values: debounce takes the payload and pushes the run time; replace takes the named
    fields, the run time only from a scheduled holder."""
    env = row.env
    fields = env.unique_replace or frozenset({"payload"})
    sets: list[str] = []
    params: list[Any] = []
    if "payload" in fields:
        sets += ["payload = %s", "schema_version = %s", "fingerprint = %s"]
        params += [prep(conn, "payload", bytes(env.payload)), env.schema_version, row.fingerprint]
    if "priority" in fields:
        sets.append("priority = %s")
        params.append(env.priority)
    if "max_attempts" in fields:
        sets.append("max_attempts = %s")
        params.append(env.max_attempts or headgate_settings.MAX_ATTEMPTS)
    if env.unique_mode == "debounce":
        sets.append(f"scheduled_at = {v.plus_ms(conn)}")
        params.append(_ms(env.unique_debounce))
        if state is State.AVAILABLE:
            sets.append("state = %s")
            params.append(State.SCHEDULED.value)
    elif "scheduled_at" in fields and state is State.SCHEDULED and not env.pending:
        at_sql, at_params = _run_time(conn, env)
        sets += [
            f"scheduled_at = {at_sql}",
            f"state = CASE WHEN {at_sql} > {v.now(conn)} THEN %s ELSE %s END",
        ]
        params += [*at_params, *at_params, State.SCHEDULED.value, State.AVAILABLE.value]
    return sets, params


def _run_time(conn: BaseDatabaseWrapper, env: Envelope) -> tuple[str, list[Any]]:
    """When ``env`` asks to run, as SQL on the store clock."""
    if env.delay is not None:
        return v.plus_ms(conn), [_ms(env.delay)]
    if env.scheduled_at is not None:
        return "%s", [prep(conn, "scheduled_at", env.scheduled_at)]
    return v.now(conn), []


# -- deadlines --------------------------------------------------------------------------


def _set_deadlines(conn: BaseDatabaseWrapper, rows: list[_Row]) -> None:
    """Write the deadline of each new job that has one, in the enqueue's transaction: an
    instant as given, a span from now on the store clock. An idempotent repeat of a caller
    id keeps the deadline its job already has."""
    dated = [r for r in rows if r.env.deadline is not None]
    if not dated:
        return
    with conn.cursor() as cursor:
        for r in dated:
            deadline = r.env.deadline
            if isinstance(deadline, datetime):
                value, params = "%s", [prep(conn, "deadline", deadline)]
            else:
                value, params = v.plus_ms(conn), [_ms(deadline)]
            cursor.execute(
                f"UPDATE headgate_job SET deadline = {value} WHERE id = %s AND deadline IS NULL",
                [*params, r.id],
            )


def _ms(span: Any) -> int:
    return int(span.total_seconds() * 1000)


def _duplicate(holder: str, key: str | None, why: str) -> DuplicateError:
    return DuplicateError(
        f"job {holder} already holds unique key {key!r} and {why}",
        existing_id=holder,
        replaced=False,
    )

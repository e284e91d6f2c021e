"""The append-only history of durable executions: read it, and append to it safely.

An append is a compare-and-set on the header's ``last_seq`` (the seq of the newest event)
made while the header row is locked, backed by the unique ``(execution, seq)`` constraint:
seqs stay contiguous from 1 and two writers can never both append at one seq. Every durable
writer locks the header before anything else it touches in the durable tables, which also
orders the wake-ups of the workflow task (see :mod:`.durable_jobs`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from django.db import transaction

from headgate_django.exceptions import (
    NotFoundError,
    PayloadTooLargeError,
    RevisionConflictError,
)
from headgate_django.kernel.replay_events import TIMER_FIRED, TIMER_SCHEDULED, Event, due_timers
from headgate_django.models import Execution, HistoryEvent
from headgate_django.store import packet
from headgate_django.store import vendor as v

EXEC_TABLE = "headgate_durable_execution"
HISTORY_TABLE = "headgate_durable_history"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class NewEvent:
    """An event to append. ``at=None`` stamps it with the store clock at insert time;
    ``fact_key`` (an Operation's execution key) allows one result event per Operation."""

    type: str
    payload: dict[str, Any]
    at: datetime | None = None
    fact_key: str | None = None


@dataclass(frozen=True)
class Locked:
    """The header fields a writer needs, read under the row lock, and the store time."""

    state: str
    last_seq: int
    task_queue: str
    timer_due: bool
    now: datetime
    #: The current run's id (the execution's own id for its first run).
    run_id: str


def to_ms(at: datetime) -> int:
    """Exact epoch milliseconds (no float rounding), as the replay engine sees instants."""
    return (at - _EPOCH) // _MS


def payload_bytes(events: Sequence[NewEvent]) -> int:
    """The JSON size of the events' payloads, as the history-size thresholds count it."""
    return sum(
        len(json.dumps(e.payload, separators=(",", ":"), ensure_ascii=False).encode())
        for e in events
    )


def prep(model: Any, column: str, value: Any, conn: Any) -> Any:
    """A Python value as the raw SQL parameter the ORM would store in ``column``."""
    return model._meta.get_field(column).get_db_prep_save(value, connection=conn)


def from_ms(ms: int) -> datetime:
    return _EPOCH + ms * _MS


def read_rows(
    conn: Any, model: Any, columns: Sequence[str], rows: Sequence[Any]
) -> list[list[Any]]:
    """Raw rows as the ORM would read ``columns`` of ``model`` (JSON decoded, aware datetimes).

    The durable hot path reads with raw SQL: building an ORM query costs more than running it.
    """
    key = (conn.alias, conn.vendor, model, tuple(columns))
    plan = _PLANS.get(key)
    if plan is None:
        plan = []
        for index, name in enumerate(columns):
            field = model._meta.get_field(name)
            col = field.get_col(model._meta.db_table)
            converters = conn.ops.get_db_converters(col) + field.get_db_converters(conn)
            if converters:
                plan.append((index, col, converters))
        _PLANS[key] = plan
    out = []
    for row in rows:
        values = list(row)
        for index, col, converters in plan:
            for converter in converters:
                values[index] = converter(values[index], col, conn)
        out.append(values)
    return out


_PLANS: dict[Any, list[Any]] = {}


def history_load(
    execution_id: str,
    *,
    after_seq: int = 0,
    upto_seq: int | None = None,
    types: Sequence[str] | None = None,
    using: str = "default",
) -> list[Event]:
    """Events with ``after_seq < seq <= upto_seq`` (of ``types``) in seq order, as the replay
    engine reads them."""
    conn = v.connection_for(using)
    q = conn.ops.quote_name
    where = ["execution_id = %s", "seq > %s"]
    params: list[Any] = [execution_id, after_seq]
    if upto_seq is not None:
        where.append("seq <= %s")
        params.append(upto_seq)
    if types is not None:
        where.append(f"{q('type')} IN ({v.placeholders(len(types))})")
        params += list(types)
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT seq, {q('type')}, payload, {q('at')} FROM {HISTORY_TABLE} "
            f"WHERE {' AND '.join(where)} ORDER BY seq",
            params,
        )
        rows = read_rows(conn, HistoryEvent, ("seq", "type", "payload", "at"), cursor.fetchall())
    return [Event(seq, type_, payload, to_ms(at)) for seq, type_, payload, at in rows]


def lock_execution(cursor: Any, conn: Any, execution_id: str) -> Locked | None:
    """Lock the header row (the durable writers' mutex); None when it does not exist."""
    now = v.now(conn)
    cursor.execute(
        f"SELECT state, last_seq, task_queue, CASE WHEN next_timer_at <= {now} THEN 1 ELSE 0 "
        f"END, {now}, run_id FROM {EXEC_TABLE} WHERE id = %s{v.for_update(conn)}",
        [execution_id],
    )
    row = cursor.fetchone()
    if row is None:
        return None
    instant = v.parse_instant(conn, row[4])
    return Locked(row[0], int(row[1]), row[2], bool(row[3]), instant, row[5] or execution_id)


def append(
    cursor: Any,
    conn: Any,
    execution_id: str,
    expected_seq: int,
    events: Sequence[NewEvent],
    header: dict[str, Any] | None = None,
    *,
    state: str | None = None,
) -> int:
    """Append ``events`` right after seq ``expected_seq`` and set ``header`` columns; return
    the new last seq, or raise :class:`RevisionConflictError` if the history moved on (or
    the execution is no longer in ``state``). The UPDATE takes the header's row lock.

    ``header["finished_at"]`` (any value) stamps the store clock.
    """
    q = conn.ops.quote_name
    sets = [f"last_seq = %s, history_bytes = history_bytes + %s, updated_at = {v.now(conn)}"]
    params: list[Any] = [expected_seq + len(events), payload_bytes(events)]
    for column, value in (header or {}).items():
        if column == "finished_at":
            sets.append(f"finished_at = {v.now(conn)}")
        else:
            sets.append(f"{q(column)} = %s")
            params.append(prep(Execution, column, value, conn))
    where, where_params = "id = %s AND last_seq = %s", [execution_id, expected_seq]
    if state is not None:
        where += " AND state = %s"
        where_params.append(state)
    cursor.execute(
        f"UPDATE {EXEC_TABLE} SET {', '.join(sets)} WHERE {where}", [*params, *where_params]
    )
    if cursor.rowcount != 1:
        raise RevisionConflictError(
            f"the history of execution {execution_id} moved past seq {expected_seq}",
            execution_id=execution_id,
        )
    if events:
        insert_events(cursor, conn, execution_id, expected_seq + 1, events)
    return expected_seq + len(events)


def append_fact(
    cursor: Any,
    conn: Any,
    execution_id: str,
    locked: Locked,
    events: Sequence[NewEvent],
    header: dict[str, Any] | None = None,
) -> int:
    """Append facts from outside a replay pass (an Operation outcome, a signal, a decision),
    first recording every timer already due, so history follows the store clock: a timer
    due before a signal arrived comes before it, however late a worker gets to either."""
    fired: list[NewEvent] = []
    if locked.timer_due:
        timers = history_load(execution_id, types=(TIMER_SCHEDULED, TIMER_FIRED), using=conn.alias)
        due = due_timers(timers, to_ms(locked.now))
        fired = [NewEvent(TIMER_FIRED, {"command_id": cid}, at=locked.now) for cid in due]
        header = {**(header or {}), "next_timer_at": next_timer(timers, fired=due)}
    return append(cursor, conn, execution_id, locked.last_seq, [*fired, *events], header)


def next_timer(history: Sequence[Event], *, fired: Sequence[str] = ()) -> datetime | None:
    """When the earliest timer of ``history`` that has not fired (nor is in ``fired``) is due."""
    done = set(fired) | {e.payload.get("command_id") for e in history if e.type == TIMER_FIRED}
    pending = [
        e.payload.get("fire_at_ms")
        for e in history
        if e.type == TIMER_SCHEDULED and e.payload.get("command_id") not in done
    ]
    valid = [at for at in pending if isinstance(at, int)]  # tolerant: replay reports corruption
    return from_ms(min(valid)) if valid else None


@dataclass(frozen=True)
class NewHeader:
    """A new execution header; ``parent_id`` and the rest are set for a child execution."""

    id: str
    name: str
    version: str
    input: Any
    task_queue: str
    business_key: str | None = None
    meta: dict[str, Any] | None = None
    parent_id: str | None = None
    parent_command_id: str = ""
    parent_close_policy: str = ""


def insert_header(cursor: Any, conn: Any, header: NewHeader, *, history_bytes: int) -> None:
    """Insert a running header at seq 1 (its ``WorkflowStarted``, of ``history_bytes``
    payload bytes, is the caller's to add)."""
    q = conn.ops.quote_name
    now = v.now(conn)
    input_param = prep(Execution, "input", header.input, conn)
    meta_param = prep(Execution, "meta", header.meta or {}, conn)
    if conn.vendor == "mysql":  # a statement must fit max_allowed_packet
        packet.check_value_sent(conn, input_param, f"the input of execution {header.id}")
        packet.check_value_sent(conn, meta_param, f"the meta of execution {header.id}")
    cursor.execute(
        f"INSERT INTO {EXEC_TABLE} (id, name, version, state, {q('input')}, "
        "failure_reason, suspended_reason, business_idempotency_key, task_queue, meta, "
        "parent_id, parent_command_id, parent_close_policy, last_seq, history_bytes, "
        "created_at, updated_at) VALUES "
        f"(%s, %s, %s, 'running', %s, '', '', %s, %s, %s, %s, %s, %s, 1, %s, {now}, {now})",
        [
            header.id,
            header.name,
            header.version,
            input_param,
            header.business_key,
            header.task_queue,
            meta_param,
            header.parent_id,
            header.parent_command_id,
            header.parent_close_policy,
            history_bytes,
        ],
    )


def insert_events(
    cursor: Any, conn: Any, execution_id: str, first_seq: int, events: Sequence[NewEvent]
) -> None:
    """Insert ``events`` at ``first_seq`` onwards: one multi-row statement, or on
    MySQL/MariaDB as many as the events need to fit ``max_allowed_packet`` (a pass may
    write several large results at once)."""
    q = conn.ops.quote_name
    prepared = [
        (first_seq + offset, event, prep(HistoryEvent, "payload", event.payload, conn))
        for offset, event in enumerate(events)
    ]

    def too_large(item: tuple[int, NewEvent, Any], sent: int, budget: int) -> Exception:
        seq, event, _ = item
        what = f"the {event.type} event at seq {seq} of execution {execution_id}"
        return PayloadTooLargeError(
            packet.too_large_message(what, sent, budget, "MAX_PAYLOAD_BYTES"),
            size=sent,
            limit=budget,
        )

    for group in packet.split(conn, prepared, itemgetter(2), _EVENT_SLACK, too_large):
        rows, params = [], []
        for seq, event, payload in group:
            rows.append(f"(%s, %s, %s, %s, {v.now(conn) if event.at is None else '%s'}, %s)")
            params += [execution_id, seq, event.type, payload]
            if event.at is not None:
                params.append(prep(HistoryEvent, "at", event.at, conn))
            params.append(event.fact_key)
        cursor.execute(
            f"INSERT INTO {HISTORY_TABLE} (execution_id, seq, {q('type')}, payload, "
            f"{q('at')}, fact_key) VALUES {', '.join(rows)}",
            params,
        )


#: The bytes of an event's row other than its payload (ids, seq, type, instant, fact key).
_EVENT_SLACK = 2048


def history_append(
    execution_id: str,
    *,
    expected_seq: int,
    events: Sequence[NewEvent],
    using: str = "default",
) -> int:
    """Append ``events`` after seq ``expected_seq``; return the new last seq.

    Raises :class:`RevisionConflictError` when another writer appended first, and
    :class:`NotFoundError` for a missing execution.
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        if lock_execution(cursor, conn, execution_id) is None:
            raise NotFoundError(f"execution {execution_id} does not exist", id=execution_id)
        return append(cursor, conn, execution_id, expected_seq, events)

"""``job_insert_many``: enqueue a batch all-or-nothing, inside the caller's transaction.

One statement inserts the jobs unless anything opposes them (a quarantined fingerprint, a
caller id that already exists, a live unique key): on PostgreSQL it probes the
quarantine itself, and a batch is a pipeline of such statements, each planned while the
server inserts the one before (:class:`_Planner`); on SQLite and MySQL/MariaDB a batch's
statement follows one probe (:mod:`.insert_values`). Whenever anything opposes, what was
written is rolled back and the batch is classified, so a refused batch leaves no trace
and the refusal is the precise error. A concurrent writer racing us to the same id or key
is caught by the database's unique constraints and classified the same way. A batch
larger than one statement should carry is written in chunks, in one transaction, so it
too is all or nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import accumulate
from operator import attrgetter
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope, check_fields, new_id, new_ids
from headgate_django.exceptions import (
    BatchError,
    ConfigurationError,
    DefinitionError,
    DuplicateError,
    IdConflictError,
    PayloadTooLargeError,
    QuarantinedError,
)
from headgate_django.kernel import sealed
from headgate_django.kernel.names import is_internal_kind
from headgate_django.kernel.states import State
from headgate_django.store import packet
from headgate_django.store import vendor as v
from headgate_django.store.admitted import current_policy
from headgate_django.store.backpressure import check_backpressure
from headgate_django.store.insert_values import delay_ms, insert_batch, limits, timing
from headgate_django.store.prepared import server_bound_cursor
from headgate_django.store.rows import prep
from headgate_django.store.unique_keys import live_holders

_COLUMNS = (
    "id, kind, queue, priority, schema_version, payload, fingerprint, state, attempt, "
    "crash_attempt, max_attempts, timeout, scheduled_at, fence, claimed_by, enqueued_at, "
    "retention, unique_key, errors, checkpoint, workflow_id, partition_key, rate_class, weight"
)

# PostgreSQL's enqueue is one statement. The state and schedule follow the same rules as
# ``_insert``: pending; a positive delay on the store clock; an absolute instant that may
# already be due; otherwise available now.
#
# A row's own values, and the "shape" it shares with the other jobs of its kind. A batch
# sends each distinct shape once, and per row an index into them: most batches hold a few
# shapes. A single row's statement carries its shape as constants (see
# ``_pg_one_statements``).
#
# psycopg dumps every element of an array in Python, which made the arrays of a 1,000-job
# batch about a third of the client's work. So the row values travel as single values the
# server cuts up: ids, fingerprints and shape numbers as one text each (ids cannot hold
# the separator, a control character; see ``validate_job_id``), the payloads as one bytea
# with each row's start and length. Unique and partition keys, which most batches do not
# have, are arrays, or ``NULL`` for none (``unnest`` pads a missing array with nulls).
_PG_SEPARATOR = "\x1f"
_PG_SHAPE = (
    ("kind", "varchar"),
    ("queue", "varchar"),
    ("priority", "integer"),
    ("schema_version", "integer"),
    ("pending", "boolean"),
    ("delay_ms", "bigint"),
    ("run_at", "timestamptz"),
    ("max_attempts", "integer"),
    ("timeout", "interval"),
    ("retention", "interval"),
    ("workflow_id", "varchar"),
    ("rate_class", "varchar"),
    ("weight", "integer"),
)


def _names(source: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(name for name, _ in source)


def _binds(source: tuple[tuple[str, str], ...], template: str) -> str:
    """One placeholder per column of ``source``: ``template`` with the column's SQL type."""
    return ", ".join(template.format(sql_type) for _, sql_type in source)


#: The channel workers ``LISTEN`` on; the payload is the queue of a job that became available.
WAKE_CHANNEL = "headgate_wakeup"
#: How a new job that is available at once wakes idle workers: its statement notifies
#: (PostgreSQL sends it at commit, de-duplicated per transaction); the per-row trigger
#: that did it cost a single insert's backend more than a tenth of its instructions. The
#: classifying path's insert returns this; a batch's and a single job's statements write
#: it as the value of ``claimed_by`` instead (see ``_pg_one_statements``), which returns
#: no rows. Jobs that become available later are announced by the trigger on ``UPDATE OF
#: state`` (migrations 0003 and 0014).
_PG_WAKE = f"CASE WHEN state = 'available' THEN pg_notify('{WAKE_CHANNEL}', queue) END"
# A batch row's wake-up, as its ``claimed_by``: the same cases as its state below, in which
# only a job available at once notifies. ``pg_notify`` returns ``void``, whose text is
# ``''``, the value a new job's ``claimed_by`` has anyway.
_PG_BATCH_WAKE = (
    "CASE WHEN pending OR delay_ms IS NOT NULL OR run_at > clock_timestamp() THEN '' "
    f"ELSE pg_notify('{WAKE_CHANNEL}', queue)::text END"
)

# Column names are unqualified: the source is a row and its shape (for a batch, joined on
# the shape's number), and no name is in both.
_PG_SELECT = (
    f"INSERT INTO headgate_job ({_COLUMNS}) "
    "SELECT id, kind, queue, priority, schema_version, payload, fingerprint, "
    f"CASE WHEN pending THEN '{State.PENDING.value}' "
    f"WHEN delay_ms IS NOT NULL THEN '{State.SCHEDULED.value}' "
    f"WHEN run_at > clock_timestamp() THEN '{State.SCHEDULED.value}' "
    f"ELSE '{State.AVAILABLE.value}' END, "
    "0, 0, max_attempts, timeout, "
    "CASE WHEN delay_ms IS NOT NULL "
    "THEN clock_timestamp() + delay_ms * interval '1 millisecond' "
    "ELSE coalesce(run_at, clock_timestamp()) END, "
    f"0, {_PG_BATCH_WAKE}, clock_timestamp(), retention, unique_key, '[]', '{{}}', "
    "workflow_id, "
    "partition_key, rate_class, weight "
)
# The quarantine probe covers the statement's rows, so a quarantined row stops all of them
# (and the batch: the row count falls short, see ``_pg_insert_batch``). The shape arrays go
# in binary (``%b``): as text, psycopg quotes every element in Python. The row values are
# cut from single texts (:data:`_PG_SEPARATOR`). No ON CONFLICT: a batch runs in a
# transaction (or savepoint) of its own, so a taken id or key can simply fail it, and the
# speculative insertion that ON CONFLICT needs cost an eighth of the server's time.
_PG_SPLIT = "string_to_array(%b::text, E'\\x1f')"  # the separator, as SQL
_PG_INSERT_MANY = (
    _PG_SELECT
    + "FROM (SELECT id, substring(%b::bytea FROM start FOR length) AS payload, fingerprint, "
    "shape, unique_key, coalesce(partition_key, '') AS partition_key "
    f"FROM unnest({_PG_SPLIT}, {_PG_SPLIT}, {_PG_SPLIT}::integer[], {_PG_SPLIT}::integer[], "
    f"{_PG_SPLIT}::integer[], %b::varchar[], %b::varchar[]) "
    "AS u(id, fingerprint, start, length, shape, unique_key, partition_key)) AS r "
    "JOIN unnest("
    + _binds(_PG_SHAPE, "%b::{}[]")
    + f") WITH ORDINALITY AS s({_names(_PG_SHAPE)}, shape) USING (shape) "
    "WHERE NOT EXISTS (SELECT 1 FROM headgate_quarantine "
    f"WHERE fingerprint = ANY({_PG_SPLIT}))"
)


# A single job's state, schedule and wake-up by its timing, on the store clock, as in
# ``_values``. The wake-up is the value of ``claimed_by`` (see ``_pg_one_statements``):
# ``{wake}`` stands for the notification, which only a job available at once sends.
_PG_ONE_TIMING = {
    "now": (f"'{State.AVAILABLE.value}'", "clock_timestamp()", "{wake}"),
    "pending": (f"'{State.PENDING.value}'", "clock_timestamp()", "''"),
    "delay": (
        f"'{State.SCHEDULED.value}'",
        "clock_timestamp() + %(delay_ms)s::bigint * interval '1 millisecond'",
        "''",
    ),
    "at": (
        f"CASE WHEN %(run_at)s::timestamptz > clock_timestamp() THEN '{State.SCHEDULED.value}' "
        f"ELSE '{State.AVAILABLE.value}' END",
        "%(run_at)s::timestamptz",
        "CASE WHEN %(run_at)s::timestamptz > clock_timestamp() THEN '' ELSE {wake} END",
    ),
}
# What a single job writes into each column besides its shape, state and schedule.
_PG_ONE_VALUES = {
    "id": "%(id)s::varchar",
    "payload": "%(payload)s::bytea",
    "fingerprint": "%(fingerprint)s::varchar",
    "attempt": "0",
    "crash_attempt": "0",
    "fence": "0",
    "enqueued_at": "clock_timestamp()",
    "unique_key": "%(unique_key)s::varchar",
    "errors": "'[]'::jsonb",
    "checkpoint": "'{}'::jsonb",
    "workflow_id": "%(workflow_id)s::varchar",
}
# The columns of :data:`_PG_SHAPE` a single job's statement writes as constants, in the
# order :func:`_pg_one_shape` gives their values.
_PG_ONE_SHAPE = (
    ("kind", "varchar"),
    ("queue", "varchar"),
    ("priority", "integer"),
    ("schema_version", "integer"),
    ("max_attempts", "integer"),
    ("retention", "interval"),
    ("timeout", "interval"),
    ("rate_class", "varchar"),
    ("weight", "integer"),
)

#: One-row statements by shape: a project enqueues a few shapes over and over, and each
#: distinct text is a statement PostgreSQL parses and plans once per connection.
_PG_ONE_SQL: dict[tuple[Any, ...], tuple[str, str]] = {}
_PG_ONE_SQL_MAX = 512


def _pg_one_statements(conn: BaseDatabaseWrapper, shape: tuple[Any, ...]) -> tuple[str, str]:
    """The one-row insert for ``shape`` (:func:`_pg_one_shape`): on its own, and for inside
    a transaction.

    The shape and the timing rule are written in as constants: psycopg dumps, and the
    server parses, each bound value on every call, while a constant is parsed once, when
    the statement is prepared; and the server sets up every expression of the statement
    again on each execution, so a job that runs now carries no ``CASE`` for a delay it
    does not have. The constants are psycopg's own quoting of each value; ``%``
    is doubled because the text still carries placeholders.

    Either statement leaves the job out if anything opposes it, and says so. Inside a
    transaction nothing may fail (it would abort the caller's transaction): an ``INSERT …
    SELECT`` whose ``WHERE`` probes the quarantine, with ``ON CONFLICT DO NOTHING`` for a
    taken id or live unique key, and the row count tells. On its own the statement is the
    whole transaction and may fail, so it is a plain ``INSERT … VALUES``, which PostgreSQL
    sets up with one node where the ``SELECT`` form needs three (about a tenth of the
    server's instructions for a single job): a taken id or key fails it on the unique index,
    and a quarantined fingerprint on the column's ``NOT NULL``, because the probe writes
    ``NULL`` for it. Either failure sends the job down the classifying path, which names
    the opposition.

    Neither statement has a ``RETURNING``: a job available at once sends its wake-up as the
    value of ``claimed_by``. ``pg_notify`` returns ``void``, whose text is ``''``, the value
    a new job's ``claimed_by`` has anyway, and PostgreSQL sends the notification at commit,
    or never if the statement or the transaction fails. A returned row cost every single
    enqueue about 17 µs (interleaved calls, per-call medians; docs/benchmarks.md).
    Inside a transaction a row skipped for a taken id or key has notified all the same: an
    idle worker wakes, finds nothing, and sleeps again.
    """
    statements = _PG_ONE_SQL.get(shape)
    if statements is None:
        from psycopg import sql  # an optional dependency: only PostgreSQL comes here

        *constants, partitioned, timing = shape
        values = dict(_PG_ONE_VALUES)
        # Most jobs name no partition: theirs is a constant, not one more bound value.
        values["partition_key"] = "%(partition_key)s::varchar" if partitioned else "''"
        state, scheduled_at, claimed_by = _PG_ONE_TIMING[timing]
        values["state"], values["scheduled_at"] = state, scheduled_at
        for (name, sql_type), value in zip(_PG_ONE_SHAPE, constants, strict=True):
            literal = sql.Literal(value).as_string(conn.connection).replace("%", "%%")
            values[name] = f"{literal}::{sql_type}"
        wake = f"pg_notify('{WAKE_CHANNEL}', {values['queue']})::text"
        values["claimed_by"] = claimed_by.format(wake=wake)
        probe = "SELECT 1 FROM headgate_quarantine WHERE fingerprint = %(fingerprint)s::varchar"
        in_transaction = (
            f"INSERT INTO headgate_job ({_COLUMNS}) SELECT "
            + ", ".join(values[name] for name in _COLUMNS.split(", "))
            + f" WHERE NOT EXISTS ({probe}) ON CONFLICT DO NOTHING"
        )
        values["fingerprint"] = (
            f"CASE WHEN EXISTS ({probe}) THEN NULL ELSE {values['fingerprint']} END"
        )
        alone = (
            f"INSERT INTO headgate_job ({_COLUMNS}) VALUES ("
            + ", ".join(values[name] for name in _COLUMNS.split(", "))
            + ")"
        )
        statements = (alone, in_transaction)
        if len(_PG_ONE_SQL) < _PG_ONE_SQL_MAX:
            _PG_ONE_SQL[shape] = statements
    return statements


class _Row(NamedTuple):
    env: Envelope
    id: str
    fingerprint: str
    caller_id: bool


_BYTES = (bytes, bytearray, memoryview)


def _validate(env: Envelope, limit: int) -> None:
    """Refuse an envelope that cannot be stored; ``limit`` is the payload cap."""
    if not isinstance(env, Envelope):
        raise DefinitionError(f"expected an Envelope, got {type(env).__name__}")
    check_fields(env)
    if not isinstance(env.payload, _BYTES):
        raise DefinitionError(f"{env.kind}: payload must be bytes")
    if len(env.payload) > limit:
        raise PayloadTooLargeError(
            f"{env.kind}: payload is {len(env.payload)} bytes, over the {limit}-byte limit "
            "(HEADGATE['MAX_PAYLOAD_BYTES']); store large data elsewhere and pass a reference",
            size=len(env.payload),
            limit=limit,
        )


def _plan(envelopes: Sequence[Envelope]) -> list[_Row]:
    """Every envelope's row, checked (see :class:`_Planner`)."""
    if len(envelopes) == 1:  # the commonest call: nothing in the batch to compare
        env = envelopes[0]
        _validate(env, headgate_settings.MAX_PAYLOAD_BYTES)
        return [_Row(env, env.id or new_id(), env.fingerprint, env.id is not None)]
    return _Planner(envelopes).rest()


class _Planner:
    """A batch's rows, planned a part at a time: each envelope checked, given its id, and
    compared with the rows before it (an id or unique key twice in one batch is refused).

    On PostgreSQL the batch's statements are pipelined, and each statement's rows are
    planned just before it is sent, while the server inserts the rows before them: planning
    a 1,000-job batch up front was a fifth of its time, spent while the server waited.
    A refusal in a later part (a payload over the limit, say) then comes after earlier parts
    were sent; they are in the batch's transaction, which the refusal rolls back.
    """

    __slots__ = ("_limit", "_seal", "_seen_ids", "_seen_keys", "envelopes", "rows")

    def __init__(self, envelopes: Sequence[Envelope], *, seal: bool = False) -> None:
        limit = headgate_settings.MAX_BATCH
        if len(envelopes) > limit:
            raise BatchError(f"a batch holds at most {limit} jobs, got {len(envelopes)}")
        self.envelopes = envelopes
        self.rows: list[_Row] = []
        self._limit = headgate_settings.MAX_PAYLOAD_BYTES
        self._seal = seal
        self._seen_ids: set[str] = set()
        # (throttled?, unique key) → id of the first job of the batch holding it
        self._seen_keys: dict[tuple[bool, str], str] = {}

    @classmethod
    def of(cls, rows: list[_Row]) -> _Planner:
        """A planner whose rows are planned already (it has nothing left to plan, so it
        skips the settings reads of ``__init__``: a single enqueue passes here)."""
        planner = cls.__new__(cls)
        planner.envelopes = [row.env for row in rows]
        planner.rows = rows
        return planner

    @property
    def done(self) -> bool:
        return len(self.rows) == len(self.envelopes)

    def take(self, most: int, most_bytes: int) -> list[_Row]:
        """Plan the next rows, at least one and at most ``most`` of them, stopping before
        their payloads would pass ``most_bytes``; return them."""
        start = len(self.rows)
        envelopes = self.envelopes[start : start + most]
        limit, seen_ids, seen_keys = self._limit, self._seen_ids, self._seen_keys
        rows: list[_Row] = []
        size = 0
        # Rows made without the named tuple's own ``__new__``, a Python function: 0.1 ms of
        # the 1.3 ms that planning a 1,000-job batch takes.
        make = tuple.__new__
        for env, fresh_id in zip(envelopes, new_ids(len(envelopes)), strict=True):
            _validate(env, limit)
            size += len(env.payload)
            if rows and size > most_bytes:
                break
            job_id = env.id or fresh_id
            if job_id in seen_ids:
                raise IdConflictError(
                    f"id conflict: job {job_id} appears twice in one batch", id=job_id
                )
            seen_ids.add(job_id)
            if env.unique_key is not None:
                # A throttle window and a lifecycle key are separate claims on a key.
                slot = (env.unique_mode == "throttle", env.unique_key)
                if slot in seen_keys:
                    raise DuplicateError(
                        f"unique key {env.unique_key!r} appears twice in one batch",
                        existing_id=seen_keys[slot],
                    )
                seen_keys[slot] = job_id
            row = make(_Row, (env, job_id, env.fingerprint, env.id is not None))
            rows.append(_sealed(row) if self._seal else row)
        self.rows += rows
        return rows

    def rest(self) -> list[_Row]:
        """Plan what is left; return every row of the batch."""
        if not self.done:
            self.take(len(self.envelopes), sys.maxsize)
        return self.rows


def seal_payload(kind: str, payload: bytes) -> bytes:
    """``payload`` sealed with the current key (``ENCRYPTION_KEY_ID``), unless encryption
    is off or the kind is internal (the library reads those payloads outside the worker)."""
    key_id = headgate_settings.ENCRYPTION_KEY_ID
    if key_id is None or is_internal_kind(kind) or sealed.is_sealed(payload):
        return payload
    try:
        key = sealed.parse_ring(headgate_settings.ENCRYPTION_KEYS)[key_id]
        return sealed.seal(payload, key_id, key)
    except (KeyError, ValueError) as exc:
        raise ConfigurationError(f"cannot encrypt the payload: {exc}") from None


def _sealed(row: _Row) -> _Row:
    """The row with its payload sealed; its fingerprint stays the plaintext's, so equal
    payloads still share one (quarantine, idempotent ids)."""
    payload = seal_payload(row.env.kind, row.env.payload)
    return (
        row if payload is row.env.payload else row._replace(env=replace(row.env, payload=payload))
    )


def job_insert_many(envelopes: Sequence[Envelope], *, using: str = "default") -> list[str]:
    """Insert every envelope or none; return the job ids in input order.

    A caller id that already exists with the same content (kind, fingerprint, queue) is an
    idempotent no-op; with other content it is :class:`IdConflictError`.
    """
    if not envelopes:
        return []
    seal = headgate_settings.ENCRYPTION_KEY_ID is not None
    conn = v.connection_for(using)
    if len(envelopes) > 1 and conn.vendor == "postgresql" and _plain_batch(envelopes):
        # Planned while it is sent (see _Planner).
        return insert_checked(conn, _Planner(envelopes, seal=seal), using)
    rows = _plan(envelopes)
    if seal:
        rows = [_sealed(row) for row in rows]
    if is_special(rows[0].env) or (len(rows) > 1 and any(is_special(r.env) for r in rows)):
        from headgate_django.store.unique_modes import insert_special

        return [done.id for done in insert_special(conn, rows, using)]
    return insert_checked(conn, _Planner.of(rows), using)


def is_special(env: Envelope) -> bool:
    """Whether ``env`` needs more than the plain insert: a uniqueness mode or a deadline
    (:mod:`.unique_modes`). Plain jobs pay these four attribute reads and nothing else."""
    return not (
        env.unique_window is None
        and env.unique_replace is None
        and env.unique_debounce is None
        and env.deadline is None
    )


def _plain_batch(envelopes: Sequence[Envelope]) -> bool:
    """Whether the plain insert takes every item: none has a uniqueness mode or a deadline.
    Read in C, one pass: a function call per envelope cost a 1,000-job batch 0.3 ms. An
    item that is not an envelope makes this False, and the full path refuses it."""
    try:
        return all(map(_PLAIN.__eq__, map(_SPECIAL_FIELDS, envelopes)))
    except AttributeError:
        return False


#: What :func:`is_special` reads, and their values on an envelope that is not special.
_SPECIAL_FIELDS = attrgetter("unique_window", "unique_replace", "unique_debounce", "deadline")
_PLAIN = (None, None, None, None)


def insert_checked(conn: BaseDatabaseWrapper, planner: _Planner, using: str) -> list[str]:
    """Insert the planner's rows under their queues' backpressure limits, all or none."""
    limited = current_policy(conn, using).backpressure
    if limited:
        incoming: dict[str, int] = {}
        for env in planner.envelopes:
            if env.queue in limited:
                incoming[env.queue] = incoming.get(env.queue, 0) + 1
        if incoming:
            # Counted and inserted under the limited queues' locks, in one transaction.
            with transaction.atomic(using=using):
                check_backpressure(conn, incoming, using=using)
                return _insert_rows(conn, planner, using)
    return _insert_rows(conn, planner, using)


#: The most rows, and payload bytes, one statement of a batch carries. A batch past either
#: is written in chunks, all in one transaction. Rows: a chunk's statement and the
#: classifying path's ``IN`` lists stay below SQLite's limit on variables (32,766 in its
#: default build; a SQLite job row binds three or more). Bytes: a chunk's statement stays
#: below MySQL/MariaDB's ``max_allowed_packet`` (16 MiB by default; quoting may double a
#: payload), and PostgreSQL's 1 GB limit on one array; a larger single job goes alone.
CHUNK_ROWS = 1000
CHUNK_BYTES = 4 * 1024 * 1024
#: PostgreSQL's statements are smaller: they are pipelined, and the client plans and
#: encodes each while the server inserts the one before (see :func:`_pg_insert_batch`).
#: A 1,000-job batch in statements of 128 or 200 rows took 13-15% less time than in one
#: (batches alternated with raw ``executemany``); statements of 64 did less well.
PIPELINED_ROWS = 128


def statement_rows(vendor: str) -> int:
    """The most rows one statement of a batch carries on ``vendor``."""
    return min(CHUNK_ROWS, PIPELINED_ROWS) if vendor == "postgresql" else CHUNK_ROWS


def insert_new(conn: BaseDatabaseWrapper, envelopes: Sequence[Envelope]) -> list[str]:
    """Insert jobs that cannot exist yet (no duplicate or quarantine checks), in statements
    that fit; return their ids. For the runtime's own batches, whose size the caller's code
    decides (a durable pass's Operations): ``MAX_BATCH`` caps what one enqueue call takes,
    not these, so they are planned a ``MAX_BATCH`` at a time. The caller's transaction
    makes the statements one write."""
    limit = headgate_settings.MAX_BATCH
    rows = [
        row for at in range(0, len(envelopes), limit) for row in _plan(envelopes[at : at + limit])
    ]
    chunks = _chunks(rows)
    if conn.vendor == "mysql":
        chunks = _packet_chunks(conn, chunks, sum(map(len, map(_PAYLOAD, rows))))
    for chunk in chunks:
        _insert(conn, chunk)
    return [row.id for row in rows]


def _insert_rows(conn: BaseDatabaseWrapper, planner: _Planner, using: str) -> list[str]:
    """Insert the planner's rows all or none: in one statement (on PostgreSQL one pipeline
    of them) when nothing opposes them, else by the classifying path."""
    if conn.vendor == "postgresql" and len(planner.envelopes) > 1:
        _pg_insert_batch(conn, planner, using)
        return [row.id for row in planner.rows]
    rows = planner.rest()
    total = sum(map(len, map(_PAYLOAD, rows)))
    chunked = len(rows) > CHUNK_ROWS or total > CHUNK_BYTES
    chunks = _chunks(rows) if chunked else [rows]
    if conn.vendor == "mysql":
        chunks = _packet_chunks(conn, chunks, total)  # refuses a job too large for one
    if chunked or len(chunks) > 1:
        # A refusal in any chunk rolls back the chunks before it too.
        with transaction.atomic(using=using):
            for chunk in chunks:
                if not _insert_unopposed(conn, chunk, using):
                    _insert_opposed(conn, chunk, using)
    elif not _insert_unopposed(conn, rows, using):
        _insert_opposed(conn, rows, using)
    return [row.id for row in rows]


#: MySQL/MariaDB: the most bytes a job's row takes in a statement besides its payload (its
#: row text, id, fingerprint, unique key, workflow id and partition key, escaped).
ROW_SLACK = 8 * 1024


def _packet_chunks(
    conn: BaseDatabaseWrapper, chunks: list[list[_Row]], total: int
) -> list[list[_Row]]:
    """MySQL/MariaDB: ``chunks`` cut again where a statement would pass the server's
    ``max_allowed_packet`` (a server set below its default, or ``MAX_PAYLOAD_BYTES`` raised
    near it); a job too large for a statement alone is refused before anything is written.
    Measured only when the batch's payloads could come near it (``total`` bytes, escaping
    at most doubling them)."""
    rows = sum(map(len, chunks))
    budget = packet.value_budget(conn)
    if budget is None or 2 * total + rows * ROW_SLACK <= budget:
        return chunks
    return [
        group
        for chunk in chunks
        for group in packet.split(conn, chunk, _PAYLOAD, ROW_SLACK, _too_large_for_packet)
    ]


def _too_large_for_packet(row: _Row, sent: int, budget: int) -> Exception:
    what = f"{row.env.kind}: the payload of job {row.id}"
    return PayloadTooLargeError(
        packet.too_large_message(what, sent, budget, "MAX_PAYLOAD_BYTES"),
        size=sent,
        limit=budget,
    )


#: A row's payload, read in C: the size check above is one pass of C calls over the batch.
_PAYLOAD = attrgetter("env.payload")


def _chunks(rows: list[_Row]) -> list[list[_Row]]:
    """``rows`` cut where a chunk would pass :data:`CHUNK_ROWS` or :data:`CHUNK_BYTES`."""
    chunks: list[list[_Row]] = []
    chunk: list[_Row] = []
    size = 0
    for row in rows:
        length = len(row.env.payload)
        if chunk and (len(chunk) == CHUNK_ROWS or size + length > CHUNK_BYTES):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(row)
        size += length
    chunks.append(chunk)
    return chunks


def _insert_opposed(conn: BaseDatabaseWrapper, rows: list[_Row], using: str) -> None:
    """The classifying path: raise the precise error for what opposes ``rows``, or insert
    those that are not idempotent repeats of existing jobs."""
    with transaction.atomic(using=using):
        to_insert = _classify(conn, rows)
        while to_insert:
            try:
                with transaction.atomic(using=using):
                    _insert(conn, to_insert)
                break
            except IntegrityError as exc:
                # Lost a race for an id or unique key. The winner's row is visible now, so
                # classify again: the same content is the idempotent no-op it would have been
                # without the race, anything else raises its precise error. Each pass drops
                # at least one row, so this ends.
                again = _classify(conn, to_insert)
                if len(again) == len(to_insert):
                    raise IdConflictError(
                        f"enqueue conflicted with a concurrent write: {exc}"
                    ) from exc
                to_insert = again


def _insert_unopposed(conn: BaseDatabaseWrapper, rows: list[_Row], using: str) -> bool:
    """Insert the jobs in one statement unless anything opposes them; False if anything does.

    A single job goes in one statement (on MySQL/MariaDB only in autocommit); on SQLite and
    MySQL/MariaDB a batch goes after one probe of the quarantine (PostgreSQL's batches take
    :func:`_pg_insert_batch`). Whatever this refused takes the classifying path, which
    raises the precise error or skips an idempotent repeat.
    """
    if conn.vendor == "postgresql":
        return _pg_one_unopposed(conn, rows[0])
    if len(rows) == 1:
        return _one_unopposed(conn, rows[0])
    return _batch_unopposed(conn, rows, using)


def _batch_unopposed(conn: BaseDatabaseWrapper, rows: list[_Row], using: str) -> bool:
    """SQLite and MySQL/MariaDB: a batch in its own transaction or savepoint, unless a
    fingerprint is quarantined; a taken id or live unique key fails it and rolls it back."""
    fingerprints = sorted({r.fingerprint for r in rows})
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM headgate_quarantine "
            f"WHERE fingerprint IN ({v.placeholders(len(fingerprints))})",
            fingerprints,
        )
        if cursor.fetchone() is not None:
            return False
    try:
        with transaction.atomic(using=using):
            if insert_batch(conn, rows) != len(rows):
                raise _Opposed
    except (_Opposed, IntegrityError):
        return False
    return True


def _one_unopposed(conn: BaseDatabaseWrapper, row: _Row) -> bool:
    """SQLite and MySQL/MariaDB: one job in one statement, with the contract of PostgreSQL's.

    A quarantined fingerprint inserts nothing (the probe is the ``SELECT``'s ``WHERE``), and
    the row count says whether the job went in. SQLite skips a taken id or live unique key
    with ``ON CONFLICT DO NOTHING`` (it reads ``INSERT … SELECT … ON CONFLICT`` only when
    the ``SELECT`` has a ``WHERE``, which the probe provides). MySQL/MariaDB have no such
    clause (``INSERT IGNORE`` would hide other errors too), so there a taken id or key fails
    the statement: harmless in autocommit, where the statement is the whole transaction,
    while inside the caller's transaction the classifying path runs instead.
    """
    mysql = conn.vendor == "mysql"
    if mysql and not (conn.get_autocommit() and not conn.in_atomic_block):
        return False
    (value,), params = _values(conn, [row])
    source = f"SELECT {value[1:-1]} FROM DUAL" if mysql else f"SELECT {value[1:-1]}"
    with conn.cursor() as cursor:
        try:
            cursor.execute(
                f"INSERT INTO headgate_job ({_COLUMNS}) {source} WHERE NOT EXISTS "
                "(SELECT 1 FROM headgate_quarantine WHERE fingerprint = %s)"
                + ("" if mysql else " ON CONFLICT DO NOTHING"),
                [*params, row.fingerprint],
            )
        except IntegrityError:
            if mysql:
                return False
            raise
        return cursor.rowcount == 1


def _pg_one_unopposed(conn: BaseDatabaseWrapper, row: _Row) -> bool:
    """PostgreSQL: insert one job in one constant-text statement unless anything opposes it.

    Nothing is inserted when its fingerprint is quarantined or its id or live unique key is
    taken: the statement fails, or inside a transaction it skips the row; the caller then
    takes the classifying path. A single row cannot be inserted in part, so it needs no
    transaction of its own: in autocommit it is one round trip, and inside the caller's
    transaction it cannot abort it.
    """
    env = row.env
    when = timing(env)
    with server_bound_cursor(conn) as cursor:
        # The cursor has opened the connection, so its autocommit flag is current.
        alone = conn.autocommit and not conn.in_atomic_block
        on_its_own, in_transaction = _pg_one_statements(conn, _pg_one_shape(env, when))
        params: dict[str, Any] = {
            "id": row.id,
            "payload": bytes(env.payload),
            "fingerprint": row.fingerprint,
            "unique_key": env.unique_key,
            "workflow_id": env.workflow_id,
        }
        if env.partition_key:
            params["partition_key"] = env.partition_key
        if when == "delay":
            params["delay_ms"] = delay_ms(env)
        elif when == "at":
            params["run_at"] = env.scheduled_at
        if not alone:
            cursor.execute(in_transaction, params)
            return cursor.rowcount == 1
        try:
            cursor.execute(on_its_own, params)
        except IntegrityError:
            return False
        return True  # a plain INSERT … VALUES inserts its row or fails


def _pg_insert_batch(conn: BaseDatabaseWrapper, planner: _Planner, using: str) -> None:
    """PostgreSQL: insert a batch all or none, in one transaction of its own (or savepoint).

    Its rows go in statements of :data:`PIPELINED_ROWS`, sent in one pipeline
    (``executemany``) while the planner plans the next. Each statement leaves its rows out
    if a fingerprint of theirs is quarantined, and fails on a taken id or live unique key;
    either way the batch is rolled back and classified whole, which raises the precise
    error or skips idempotent repeats.
    """
    try:
        with transaction.atomic(using=using), server_bound_cursor(conn) as cursor:
            statements = _pg_statements(planner, statement_rows(conn.vendor))
            # An iterator, which psycopg reads as it sends (Django's stubs say a sequence).
            cursor.executemany(_PG_INSERT_MANY, statements)  # type: ignore[arg-type]
            if cursor.rowcount != len(planner.rows):
                raise _Opposed
    except (_Opposed, IntegrityError):
        rows = planner.rest()
        with transaction.atomic(using=using):
            for chunk in _chunks(rows):
                _insert_opposed(conn, chunk, using)


def _pg_statements(planner: _Planner, most: int) -> Iterator[list[Any]]:
    """The parameters of each of the batch's statements, each planned when it is asked for.

    The first statement is a quarter of the others: the server waits for it, and starts on
    it sooner (then stays busy while the client plans the next ones)."""
    first = max(1, most // 4)
    while not planner.done:
        yield _pg_batch_params(planner.take(first, CHUNK_BYTES))
        first = most


class _Opposed(Exception):
    """Rolls back a batch that was inserted only in part."""


#: An envelope's fields that make its :func:`_pg_shape`, read in one call: envelopes from one
#: task share them, so a batch computes each distinct shape once.
_SHAPE_FIELDS = attrgetter(
    "kind",
    "queue",
    "priority",
    "schema_version",
    "pending",
    "delay",
    "scheduled_at",
    "max_attempts",
    "timeout",
    "retention",
    "workflow_id",
    "rate_class",
    "weight",
)


def _pg_batch_params(rows: list[_Row]) -> list[Any]:
    """The parameters of :data:`_PG_INSERT_MANY` for ``rows``."""
    numbers: dict[tuple[Any, ...], str] = {}  # the shape's fields → its number (ORDINALITY)
    shapes: list[tuple[Any, ...]] = []
    ids, fingerprints, payloads, lengths, shape_of = [], [], [], [], []
    keyed = partitioned = False
    for env, job_id, fingerprint, _ in rows:
        fields = _SHAPE_FIELDS(env)
        number = numbers.get(fields)
        if number is None:
            shapes.append(_pg_shape(env))
            number = numbers[fields] = str(len(shapes))
        shape_of.append(number)
        ids.append(job_id)
        fingerprints.append(fingerprint)
        payloads.append(env.payload)
        lengths.append(len(env.payload))
        keyed = keyed or env.unique_key is not None
        partitioned = partitioned or bool(env.partition_key)
    sep = _PG_SEPARATOR
    fingerprint_text = sep.join(fingerprints)
    return [
        b"".join(payloads),
        sep.join(ids),
        fingerprint_text,
        sep.join(map(str, accumulate(lengths[:-1], initial=1))),
        sep.join(map(str, lengths)),
        sep.join(shape_of),
        [r.env.unique_key for r in rows] if keyed else None,
        [r.env.partition_key for r in rows] if partitioned else None,
        *(list(column) for column in zip(*shapes, strict=True)),
        fingerprint_text,
    ]


def _pg_shape(env: Envelope) -> tuple[Any, ...]:
    """The values of :data:`_PG_SHAPE`."""
    max_attempts, retention = limits(env)
    return (
        env.kind,
        env.queue,
        env.priority,
        env.schema_version,
        env.pending,
        delay_ms(env),
        None if env.pending else env.scheduled_at,
        max_attempts,
        env.timeout,
        retention,
        env.workflow_id,
        env.rate_class,
        env.weight,
    )


def _pg_one_shape(env: Envelope, when: str) -> tuple[Any, ...]:
    """The values of :data:`_PG_ONE_SHAPE`, whether it names a partition, then the timing:
    a single job's statement key."""
    return (
        env.kind,
        env.queue,
        env.priority,
        env.schema_version,
        *limits(env),
        env.timeout,
        env.rate_class,
        env.weight,
        bool(env.partition_key),
        when,
    )


def _classify(conn: BaseDatabaseWrapper, rows: list[_Row]) -> list[_Row]:
    with conn.cursor() as cursor:
        fingerprints = sorted({r.fingerprint for r in rows})
        cursor.execute(
            "SELECT fingerprint FROM headgate_quarantine "
            f"WHERE fingerprint IN ({v.placeholders(len(fingerprints))})",
            fingerprints,
        )
        hit = cursor.fetchone()
        if hit:
            raise QuarantinedError(
                f"fingerprint {hit[0]} is quarantined after repeated crashes; release it first",
                fingerprint=hit[0],
            )
        skip: set[str] = set()
        caller = [r for r in rows if r.caller_id]
        if caller:
            cursor.execute(
                "SELECT id, kind, fingerprint, queue FROM headgate_job "
                f"WHERE id IN ({v.placeholders(len(caller))})",
                [r.id for r in caller],
            )
            existing = {row[0]: row[1:] for row in cursor.fetchall()}
            for r in caller:
                if r.id not in existing:
                    continue
                if existing[r.id] != (r.env.kind, r.fingerprint, r.env.queue):
                    raise IdConflictError(f"id conflict: job {r.id}", id=r.id)
                skip.add(r.id)
        keyed = [r.env.unique_key for r in rows if r.env.unique_key and r.id not in skip]
    holders = live_holders(conn, keyed)
    if holders:
        existing_id, key = holders[0]
        raise DuplicateError(
            f"a live job ({existing_id}) already holds unique key {key!r}",
            existing_id=existing_id,
        )
    return [r for r in rows if r.id not in skip]


def _insert(conn: BaseDatabaseWrapper, rows: list[_Row]) -> None:
    values, params = _values(conn, rows)
    wake = f" RETURNING {_PG_WAKE}" if conn.vendor == "postgresql" else ""
    with conn.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO headgate_job ({_COLUMNS}) VALUES {', '.join(values)}{wake}", params
        )


def _values(conn: BaseDatabaseWrapper, rows: list[_Row]) -> tuple[list[str], list[Any]]:
    """A parenthesised row of :data:`_COLUMNS` per job (state and schedule on the store
    clock), and the parameters of them all, in order."""
    now = v.now(conn)
    values: list[str] = []
    params: list[Any] = []
    empty_list = prep(conn, "errors", [])
    empty_dict = prep(conn, "checkpoint", {})
    for r in rows:
        env = r.env
        when = timing(env)
        if when == "pending":
            state_sql, sched_sql, extra = "%s", now, [State.PENDING.value]
        elif when == "delay":
            state_sql, sched_sql, extra = "%s", v.plus_ms(conn), [State.SCHEDULED.value]
        elif when == "at":
            state_sql = f"CASE WHEN %s > {now} THEN %s ELSE %s END"
            sched_sql = "%s"
            at = prep(conn, "scheduled_at", env.scheduled_at)
            extra = [at, State.SCHEDULED.value, State.AVAILABLE.value]
        else:
            state_sql, sched_sql, extra = "%s", now, [State.AVAILABLE.value]
        values.append(
            f"(%s, %s, %s, %s, %s, %s, %s, {state_sql}, 0, 0, %s, %s, {sched_sql}, 0, '', "
            f"{now}, %s, %s, %s, %s, %s, %s, %s, %s)"
        )
        params += [r.id, env.kind, env.queue, env.priority, env.schema_version]
        params += [prep(conn, "payload", bytes(env.payload)), r.fingerprint]
        params += extra
        max_attempts, retention = limits(env)
        params += [max_attempts, prep(conn, "timeout", env.timeout)]
        if when == "delay":
            params.append(delay_ms(env))
        elif when == "at":
            params.append(at)
        params += [
            prep(conn, "retention", retention),
            env.unique_key,
            empty_list,
            empty_dict,
            env.workflow_id,
            env.partition_key,
            env.rate_class,
            env.weight,
        ]
    return values, params

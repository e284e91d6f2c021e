"""What a new job's row holds, and a batch's rows as SQLite and MySQL/MariaDB insert them.

A batch there is written with constant row texts, one per *shape* (what the jobs of a
task share: kind, queue, priority, limits, timing), with that shape's values written in
as constants. A row then binds only what is its own (id, payload, fingerprint, and a
unique key, workflow or partition when it has one). Binding all twenty-four columns of
every row cost the 1,000-job enqueue most of its time: Django converting each value
through its model field, mysqlclient quoting each in Python, SQLite parsing a statement
of 24,000 placeholders. The rows still go in one multi-row ``INSERT … VALUES``: on
SQLite, one execution per row (``executemany``) was ten times slower, because every
execution opens a cursor on each of the table's fifteen indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope
from headgate_django.kernel.states import State
from headgate_django.store import vendor as v
from headgate_django.store.rows import prep

if TYPE_CHECKING:
    from headgate_django.store.insert import _Row


def timing(env: Envelope) -> str:
    """When the job runs: ``now``, ``pending`` (on promotion), after a ``delay`` or ``at``
    an instant (which may already be due). A delay under the store clock's millisecond is
    now: it would otherwise park the job ``scheduled`` at the current instant, to wait for a
    promotion it has no reason to wait for."""
    if env.pending:
        return "pending"
    if delay_ms(env):
        return "delay"
    if env.scheduled_at is not None:
        return "at"
    return "now"


def default_limits() -> tuple[int, timedelta]:
    """The settings' ``MAX_ATTEMPTS`` and ``RETENTION``: read once for a whole batch."""
    return headgate_settings.MAX_ATTEMPTS, headgate_settings.RETENTION


def limits(env: Envelope, defaults: tuple[int, timedelta] | None = None) -> tuple[int, timedelta]:
    """The job's ``max_attempts`` and ``retention``, ``defaults`` (the settings') filled in."""
    attempts, retention = defaults or default_limits()
    return (
        env.max_attempts or attempts,
        env.retention if env.retention is not None else retention,
    )


def delay_ms(env: Envelope) -> int | None:
    """A delay in whole milliseconds, truncated; ``None`` for none (under 1 ms is none)."""
    if env.delay is None:
        return None
    return int(env.delay.total_seconds() * 1000) or None


# The columns of a batch's row, in the order of its bound values: the row's own first,
# then its timing's (``at`` binds its instant twice, ``delay`` its milliseconds once), then
# the optional ones; the rest are the shape's constants.
_ORDER = (
    "id",
    "payload",
    "fingerprint",
    "state",
    "scheduled_at",
    "unique_key",
    "workflow_id",
    "partition_key",
    "kind",
    "queue",
    "priority",
    "schema_version",
    "max_attempts",
    "timeout",
    "retention",
    "rate_class",
    "weight",
    "attempt",
    "crash_attempt",
    "fence",
    "claimed_by",
    "enqueued_at",
    "errors",
    "checkpoint",
)
_INSERT = f"INSERT INTO headgate_job ({', '.join(_ORDER)}) VALUES "

#: Row texts by database alias and shape: a project enqueues a few shapes over and over.
_TEMPLATES: dict[tuple[Any, ...], str] = {}
_TEMPLATES_MAX = 512


def insert_batch(conn: BaseDatabaseWrapper, rows: Sequence[_Row]) -> int:
    """Insert ``rows`` (SQLite or MySQL/MariaDB) and return how many went in.

    A taken id or live unique key raises ``IntegrityError``; the caller runs this in a
    transaction or savepoint of its own and takes the classifying path instead.
    """
    defaults = default_limits()
    alias = conn.alias
    texts: list[str] = []
    params: list[Any] = []
    for row in rows:
        env = row.env
        when = timing(env)
        shape = (
            alias,
            env.kind,
            env.queue,
            env.priority,
            env.schema_version,
            *limits(env, defaults),
            env.timeout,
            env.rate_class,
            env.weight,
            when,
            env.unique_key is not None,
            env.workflow_id is not None,
            bool(env.partition_key),
        )
        texts.append(_TEMPLATES.get(shape) or _template(conn, shape))
        params += (row.id, bytes(env.payload), row.fingerprint)
        if when != "now":
            params += _timing_params(conn, env, when)
        if shape[-3]:
            params.append(env.unique_key)
        if shape[-2]:
            params.append(env.workflow_id)
        if shape[-1]:
            params.append(env.partition_key)
    with conn.cursor() as cursor:
        cursor.execute(_INSERT + ", ".join(texts), params)
        return int(cursor.rowcount)


def _timing_params(conn: BaseDatabaseWrapper, env: Envelope, when: str) -> tuple[Any, ...]:
    if when == "delay":
        return (delay_ms(env),)
    if when == "at":
        at = prep(conn, "scheduled_at", env.scheduled_at)
        return (at, at)
    return ()


def _template(conn: BaseDatabaseWrapper, shape: tuple[Any, ...]) -> str:
    """The parenthesised row text of ``shape`` (see :func:`insert_batch`), kept for reuse."""
    (
        _alias,
        kind,
        queue,
        priority,
        schema_version,
        max_attempts,
        retention,
        timeout,
        rate_class,
        weight,
        when,
        keyed,
        in_workflow,
        partitioned,
    ) = shape
    now = v.now(conn)
    state = {
        "now": _text(State.AVAILABLE.value),
        "pending": _text(State.PENDING.value),
        "delay": _text(State.SCHEDULED.value),
        "at": f"CASE WHEN %s > {now} THEN {_text(State.SCHEDULED.value)} "
        f"ELSE {_text(State.AVAILABLE.value)} END",
    }[when]
    scheduled = {"now": now, "pending": now, "delay": v.plus_ms(conn), "at": "%s"}[when]
    values = {
        "id": "%s",
        "payload": "%s",
        "fingerprint": "%s",
        "state": state,
        "scheduled_at": scheduled,
        "unique_key": "%s" if keyed else "NULL",
        "workflow_id": "%s" if in_workflow else "NULL",
        "partition_key": "%s" if partitioned else "''",
        "kind": _literal(conn, kind),
        "queue": _literal(conn, queue),
        "priority": _literal(conn, priority),
        "schema_version": _literal(conn, schema_version),
        "max_attempts": _literal(conn, max_attempts),
        "timeout": _literal(conn, prep(conn, "timeout", timeout)),
        "retention": _literal(conn, prep(conn, "retention", retention)),
        "rate_class": _literal(conn, rate_class),
        "weight": _literal(conn, weight),
        "attempt": "0",
        "crash_attempt": "0",
        "fence": "0",
        "claimed_by": "''",
        "enqueued_at": now,
        "errors": "'[]'",
        "checkpoint": "'{}'",
    }
    template = "(" + ", ".join(values[name] for name in _ORDER) + ")"
    if len(_TEMPLATES) < _TEMPLATES_MAX:
        _TEMPLATES[shape] = template
    return template


def _text(value: str) -> str:
    """A constant string of ours (a state name) as SQL."""
    return f"'{value}'"


def _literal(conn: BaseDatabaseWrapper, value: Any) -> str:
    """``value`` (``None``, an integer or a string) as a constant of the statement's text,
    quoted as the database reads it; ``%`` is doubled, as the text still has placeholders."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(int(value))
    if conn.vendor == "mysql":
        # The client's own quoting, which knows the connection's character set and SQL mode.
        conn.ensure_connection()
        quoted = conn.connection.literal(str(value)).decode()
    else:
        quoted = "'" + str(value).replace("'", "''") + "'"
    return quoted.replace("%", "%%")

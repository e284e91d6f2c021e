"""SQL that differs between PostgreSQL, MySQL/MariaDB and SQLite, and nothing else.

Instants are always computed by the database: ``now()`` and the ``plus_*`` helpers return
SQL fragments, never Python datetimes, so a worker's clock cannot move a schedule, a
backoff or a lease. Fragments use ``%s`` placeholders and ``%%`` for a literal percent,
because every query here goes through Django's cursor with a parameter list.
"""

from __future__ import annotations

import logging
import threading
from asyncio import _get_running_loop
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

T = TypeVar("T")


def sqlite_instant(base: str = "'now'", *modifiers: str) -> str:
    """An SQLite instant in the text form Django stores: ``YYYY-MM-DD HH:MM:SS.ffffff``.

    SQLite compares instants as text. Its clock has millisecond precision (``%f`` gives
    ``SS.SSS``), while Django writes six fraction digits, and ``…03.123000`` sorts after
    ``…03.123``: a job scheduled by Django for millisecond T would be due only at T + 1 ms.
    Padding the clock to six digits makes equal instants compare equal.
    """
    args = ", ".join((base, *modifiers))
    return f"(strftime('%%Y-%%m-%%d %%H:%%M:%%f', {args}) || '000')"


_SQLITE_NOW = sqlite_instant()


def connection_for(using: str) -> BaseDatabaseWrapper:
    """``connections[using]``, without asgiref's toll in a thread where no event loop runs.

    Django keeps each thread's connection wrappers in an asgiref ``Local`` with
    ``thread_critical=True``: in such a thread, a plain ``threading.local``. asgiref finds
    that out on every lookup by raising and catching ``RuntimeError`` from
    ``asyncio.get_running_loop()``, which made this lookup a twelfth of a single enqueue's
    client-side instructions. The same storage is read here directly when no loop runs and
    it holds the wrapper already; otherwise (a running loop, a thread's first lookup, a
    storage of another shape) ``connections`` answers as usual.
    """
    if _get_running_loop() is None:
        storage = thread_storage()
        if storage is not None:
            conn = getattr(storage, using, None)
            if conn is not None:
                return conn  # type: ignore[no-any-return]
    return connections[using]


def thread_storage() -> threading.local | None:
    """The ``threading.local`` in which Django keeps this thread's connection wrappers, by
    alias; None where asgiref stores them otherwise (then ask ``connections``). Beside the
    wrappers it may hold asgiref's own ``cvar`` (once an event loop ran in the thread)."""
    # Django's and asgiref's own state; neither is in the type stubs.
    storage = getattr(connections._connections, "_storage", None)  # type: ignore[attr-defined]
    return storage if type(storage) is threading.local else None


def vendor(conn: BaseDatabaseWrapper) -> str:
    return conn.vendor  # "postgresql", "mysql" or "sqlite"


def now(conn: BaseDatabaseWrapper) -> str:
    if conn.vendor == "postgresql":
        return "clock_timestamp()"
    if conn.vendor == "mysql":
        return "UTC_TIMESTAMP(6)"
    return _SQLITE_NOW


def plus_ms(conn: BaseDatabaseWrapper, ms: str = "%s") -> str:
    """``now + ms milliseconds``: one placeholder, or the SQL expression ``ms``."""
    if conn.vendor == "postgresql":
        return f"(clock_timestamp() + ({ms} * interval '1 millisecond'))"
    if conn.vendor == "mysql":
        return f"(UTC_TIMESTAMP(6) + INTERVAL ({ms} * 1000) MICROSECOND)"
    return sqlite_instant("'now'", f"printf('%%+.3f seconds', {ms} / 1000.0)")


def cutoff(conn: BaseDatabaseWrapper, *, offset: bool = False) -> str:
    """``now`` (with ``offset``: ``now + %s milliseconds``, one placeholder) for a scan that
    compares an indexed column with the store clock, such as "every job due by now".

    PostgreSQL's ``clock_timestamp()`` is volatile, so the planner cannot bound an index
    with it and reads every row the rest of the condition leaves: each promotion read every
    future-scheduled job, each eviction every retained one. ``statement_timestamp()`` is
    the store clock when the statement began and constant through it, so it can. MySQL's and
    SQLite's clocks are constant through a statement already.
    """
    if conn.vendor == "postgresql":
        base = "statement_timestamp()"
        return f"({base} + (%s * interval '1 millisecond'))" if offset else base
    return plus_ms(conn) if offset else now(conn)


def plus_duration_column(conn: BaseDatabaseWrapper, column: str) -> str:
    """``now + <column>`` for a DurationField column (interval on PostgreSQL, µs elsewhere)."""
    if conn.vendor == "postgresql":
        return f"(clock_timestamp() + {column})"
    if conn.vendor == "mysql":
        return f"(UTC_TIMESTAMP(6) + INTERVAL {column} MICROSECOND)"
    return sqlite_instant("'now'", f"printf('%%+.6f seconds', {column} / 1000000.0)")


def skip_locked(conn: BaseDatabaseWrapper) -> str:
    """Row locks that never wait: SQLite needs none, its writer lock is taken up front."""
    return "" if conn.vendor == "sqlite" else " FOR UPDATE SKIP LOCKED"


def for_update(conn: BaseDatabaseWrapper) -> str:
    return "" if conn.vendor == "sqlite" else " FOR UPDATE"


def mysql_index_hint(conn: BaseDatabaseWrapper, name: str) -> str:
    """``FORCE INDEX (name)`` on MySQL/MariaDB, nothing elsewhere: for a range its
    optimizer would read through the plain ``state`` index and filter row by row."""
    return f" FORCE INDEX ({name})" if conn.vendor == "mysql" else ""


def jobs_by_id(conn: BaseDatabaseWrapper) -> str:
    """The job table for a statement that locks rows it names by id (an ``UPDATE`` or a
    ``SELECT … FOR UPDATE`` with ``id IN (…)`` and a condition on state, lease or
    deadline), read through its primary key on MySQL/MariaDB.

    When few jobs meet the other condition, InnoDB's optimizer may read a state-led index
    instead of the ids, and such a statement locks every entry it reads: a claim then
    waited on the row another worker's claim had just taken, until that claim committed
    (seen at a three-job backlog). By primary key it locks only the rows it names.
    """
    return "headgate_job" + mysql_index_hint(conn, "PRIMARY")


def delete_jobs_by_id(conn: BaseDatabaseWrapper) -> str:
    """``DELETE FROM`` the job table, for rows named by id, as :func:`jobs_by_id` reads
    them (MySQL/MariaDB take an index hint only in the multiple-table form)."""
    if conn.vendor == "mysql":
        return f"DELETE headgate_job FROM {jobs_by_id(conn)}"
    return "DELETE FROM headgate_job"


def claim_index_hint(conn: BaseDatabaseWrapper, by_queue: bool) -> str:
    """The claim-ordered index that claim candidates must be read through, where the
    planner would not choose it: ``headgate_job_claim`` when the claim names its queues,
    else ``headgate_job_claim_all``.

    MySQL/MariaDB (the plain twins of migration 0002): left to itself the optimizer scans
    and sorts a small table instead, and with ``FOR UPDATE SKIP LOCKED`` that locks every
    available row, so a concurrent claim finds nothing. SQLite: without statistics it
    reads every available row through the ``(state, queue)`` index and sorts them all for
    each claim (6.8 ms for a claim of 100 at a 20,000-job backlog, against 0.07 ms through
    the claim index). ``INDEXED BY`` fails the statement when the index is missing, so it
    is named only once the database is known to have it. PostgreSQL's claim function
    chooses its own plan.
    """
    name = "headgate_job_claim" if by_queue else "headgate_job_claim_all"
    if conn.vendor == "mysql":
        return f" FORCE INDEX ({name}_my)"
    if conn.vendor == "sqlite" and _sqlite_index_exists(conn, name):
        return f" INDEXED BY {name}"
    return ""


def _sqlite_index_exists(conn: BaseDatabaseWrapper, name: str) -> bool:
    """Whether the SQLite database has index ``name``, asked once per session."""

    def ask() -> bool:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = %s", [name])
            return cursor.fetchone() is not None

    return per_session(conn, f"sqlite index {name}", ask)


#: Where a connection wrapper keeps :func:`per_session` answers.
SESSION_FACTS = "_headgate_session_facts"


def per_session(conn: BaseDatabaseWrapper, fact: str, ask: Callable[[], T]) -> T:
    """``ask()``, answered once for as long as ``conn`` keeps its database session.

    For facts about the schema that a hot statement depends on (a function or an index
    exists): a migration may change them, and a new session asks again.
    """
    conn.ensure_connection()
    session = conn.connection
    known: tuple[Any, dict[str, Any]] | None = conn.__dict__.get(SESSION_FACTS)
    if known is None or known[0] is not session:
        known = conn.__dict__[SESSION_FACTS] = (session, {})
    if fact not in known[1]:
        known[1][fact] = ask()
    answer: T = known[1][fact]
    return answer


def has_pg_function(conn: BaseDatabaseWrapper, name: str) -> bool:
    """Whether the PostgreSQL database has the function ``name``, asked once per session.

    A migration creates each of the store's functions. A database built from the models
    without running migrations (a test run with ``--nomigrations``) lacks them; its
    claims take the portable statements instead, which work everywhere but let the
    planner's statistics choose their plan.
    """

    def ask() -> bool:
        with conn.cursor() as cursor:
            cursor.execute("SELECT to_regproc(%s) IS NOT NULL", [name])
            found = bool(cursor.fetchone()[0])
        if not found:
            logging.getLogger("headgate_django.store").warning(
                "PostgreSQL function %s() is missing (were migrations skipped?); "
                "claims use portable SQL until `manage.py migrate` creates it",
                name,
            )
        return found

    return per_session(conn, f"function {name}", ask)


def has_returning(conn: BaseDatabaseWrapper) -> bool:
    """UPDATE … RETURNING: PostgreSQL and SQLite ≥ 3.35, not MySQL/MariaDB."""
    return conn.vendor in ("postgresql", "sqlite")


def one_statement_is_atomic(conn: BaseDatabaseWrapper) -> bool:
    """Whether a lone fenced ``UPDATE``/``DELETE … RETURNING`` may run in autocommit.

    On PostgreSQL it is atomic by itself, so BEGIN and COMMIT are two round trips for
    nothing. SQLite keeps ``BEGIN IMMEDIATE``: in autocommit the statement reads first and
    its upgrade to the write lock can fail without waiting. MySQL/MariaDB need two
    statements (no ``RETURNING``).
    """
    return conn.vendor == "postgresql"


#: Separates the items of a list sent to PostgreSQL as one string (:func:`pg_list`): the unit
#: separator, a control character that no job id, lease id, queue or kind may hold.
PG_LIST_SEP = "\x1f"


def pg_list(sql_type: str) -> str:
    """One text parameter that PostgreSQL splits into a ``sql_type`` array.

    psycopg dumps a list parameter element by element in Python: about 50 µs for a claim's
    twenty kind names, about 3 µs per acked job for a fenced write's three lists. Joining
    the items with :data:`PG_LIST_SEP` (:func:`pg_list_param`) is done in C.
    """
    return f"string_to_array(%s::text, chr(31))::{sql_type}[]"


def pg_list_param(items: Iterable[str]) -> str:
    """``items`` as the parameter :func:`pg_list` takes; none may contain the separator."""
    return PG_LIST_SEP.join(items)


def states_in(states: Iterable[Any]) -> str:
    """``states`` (``State`` members) as the quoted list of ``state IN (…)``, written into
    the statement rather than bound, in the order given.

    A scan that a partial index on those states should serve must repeat the index's
    condition as the index states it, same order: SQLite matches a partial index against
    the statement's text, not its bound values, and read every job for each promotion
    pass while the states were bound (26 ms beside 200,000 finished jobs, every 0.2 s,
    under the write lock). The values are the store's own constants, never input.
    """
    return ", ".join(f"'{state.value}'" for state in states)


def concat(conn: BaseDatabaseWrapper, *parts: str) -> str:
    """SQL expressions ``parts`` joined into one string: ``||`` is a logical OR on
    MySQL/MariaDB (unless ``PIPES_AS_CONCAT``), which have ``CONCAT`` instead."""
    if conn.vendor == "mysql":
        return f"CONCAT({', '.join(parts)})"
    return "(" + " || ".join(parts) + ")"


def placeholders(n: int) -> str:
    return ", ".join(["%s"] * n)


def row_values(rows: int, width: int) -> str:
    """``VALUES (%s, …), (…)`` for a row-value IN (PostgreSQL and SQLite)."""
    one = "(" + placeholders(width) + ")"
    return "VALUES " + ", ".join([one] * rows)


def flat(rows: Iterable[Sequence[Any]]) -> list[Any]:
    return [value for row in rows for value in row]


def db_now(using: str = "default") -> datetime:
    """The database's current time, as an aware UTC datetime."""
    conn = connections[using]
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {now(conn)}", [])
        value = cursor.fetchone()[0]
    return parse_instant(conn, value)


def parse_instant(conn: BaseDatabaseWrapper, value: Any) -> datetime:
    from django.db.models import DateTimeField

    field = DateTimeField()
    converters = conn.ops.get_db_converters(_Expr(field))  # type: ignore[arg-type]
    for converter in converters:
        value = converter(value, _Expr(field), conn)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        from datetime import UTC

        value = value.replace(tzinfo=UTC)
    return value


class _Expr:
    """The minimal expression shape Django's converters expect."""

    def __init__(self, field: Any) -> None:
        self.output_field = field

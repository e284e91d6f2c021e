"""A cursor that binds parameters on the server, for the hot constant-text statements.

Django's psycopg cursors bind on the client: every ``execute`` scans the SQL text for
placeholders and quotes each parameter into it in Python, which was most of the time of a
1,000-job enqueue and a large part of each batched ack. A server-binding cursor sends the
text and the parameters apart (arrays in binary), and psycopg prepares a statement once it
has run :data:`PREPARE_AFTER` times on a connection, so PostgreSQL stops parsing and
planning it.

Django turns psycopg's prepared statements off (``prepare_threshold=None``) so that
transaction-pooling proxies keep working, which would leave every project on the slow
path unless it knew to set the option. So the store turns them on by itself, on each
connection it makes such a cursor for, unless ``HEADGATE["PREPARE_STATEMENTS"]`` says no
or the alias shows signs of a pooler (:func:`prepares_statements`). Only server-binding
cursors ever prepare: Django's own client-binding cursors, which run every ORM query, are
unaffected.

It pays most for statements whose text never changes (array parameters instead of one
placeholder per row), and only on PostgreSQL; every other vendor gets Django's cursor.
The cursor is still wrapped by Django, so errors become ``django.db`` errors, the broken
transaction check applies and ``execute_wrapper`` still sees it.

Each connection keeps one such cursor and hands it out again: making and closing a psycopg
cursor and its Django wrapper cost about as much Python as a single-row enqueue's own
work. While the kept cursor is inside a ``with`` block, a nested call gets a fresh one, as
does every call on a connection shared between threads; with query logging on (``DEBUG``)
every call gets a fresh debug cursor, as Django's would.
"""

from __future__ import annotations

from _thread import get_ident
from asyncio import _get_running_loop
from functools import cache
from typing import Any

from django.apps import apps
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from headgate_django.conf import headgate_settings

#: Where a connection wrapper (one per thread and alias) keeps its reusable cursor.
_KEPT = "_headgate_server_cursor"
#: Runs of a statement on one connection before psycopg prepares it (psycopg's own default).
PREPARE_AFTER = 5


class _KeptCursor(CursorWrapper):
    """A Django cursor wrapper that leaving a ``with`` block releases rather than closes."""

    in_use = False

    def __enter__(self) -> _KeptCursor:
        self.in_use = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.in_use = False

    def execute(self, sql: Any, params: Any = None) -> Any:
        """Django's ``execute`` where nothing wraps it: the same checks and error mapping,
        without chaining the (absent) execute wrappers through two more Python frames.
        Execute wrappers, and a query during app loading (which Django warns about), take
        Django's own path."""
        db = self.db
        if db.execute_wrappers or not apps.ready:
            return super().execute(sql, params)
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            return self.cursor.execute(sql, params)


def server_bound_cursor(conn: BaseDatabaseWrapper) -> CursorWrapper:
    """Like ``conn.cursor()``, but binding on the server when the connection is psycopg 3.

    Use it as a context manager (``with server_bound_cursor(conn) as cursor:``): the
    cursor may be the connection's kept one, which stays open for the next caller.
    """
    kept: _KeptCursor | None = conn.__dict__.get(_KEPT)
    if kept is not None and _reusable(kept, conn):
        return kept
    if conn.vendor != "postgresql" or not _is_psycopg3():
        return conn.cursor()
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    conn.validate_thread_sharing()
    if conn.queries_logged:
        return conn.make_debug_cursor(_new(conn))
    # Nested, or a connection shared between threads (a live-server test): an ordinary
    # cursor, closed on exit, so two users never read each other's results.
    if (kept is not None and kept.in_use) or conn.allow_thread_sharing:
        return conn.make_cursor(_new(conn))
    if kept is None or kept.cursor.connection is not conn.connection or kept.cursor.closed:
        kept = conn.__dict__[_KEPT] = _KeptCursor(_new(conn), conn)
    return kept


def _reusable(kept: _KeptCursor, conn: BaseDatabaseWrapper) -> bool:
    """Whether the kept cursor can be handed out without the checks ``conn.cursor()`` makes.

    Those checks (health, connection, thread, event loop) cost a single enqueue about a
    seventh of its client-side instructions; each is answered here by the state it would
    leave unchanged, and anything else takes the full path. A running event loop goes there too, so that Django's
    refusal of synchronous database calls from async code is raised as usual.
    """
    return (
        not kept.in_use
        and conn.connection is not None
        and kept.cursor.connection is conn.connection
        and not kept.cursor.closed
        # Django's own state behind close_if_health_check_failed and validate_thread_sharing
        # (the type stubs leave it out).
        and not (conn.health_check_enabled and not conn.health_check_done)  # type: ignore[attr-defined]
        and conn._thread_ident == get_ident()  # type: ignore[attr-defined]
        # allow_thread_sharing without taking its lock: the count changes only when a test
        # shares the connection, before it hands it to another thread.
        and not conn._thread_sharing_count  # type: ignore[attr-defined]
        and _get_running_loop() is None
        and not conn.queries_logged
    )


@cache
def _is_psycopg3() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def prepares_statements(conn: BaseDatabaseWrapper) -> bool:
    """Whether the store turns psycopg's prepared statements on for ``conn``'s connections.

    ``HEADGATE["PREPARE_STATEMENTS"]`` decides when it is ``True`` or ``False``. Left at
    ``None``, yes, except where the project has chosen for itself (``OPTIONS`` names
    ``prepare_threshold`` or ``server_side_binding``) or where the alias says it sits
    behind a transaction pooler, whose server sessions change between transactions and so
    lose what was prepared on them (PgBouncer before 1.21): ``DISABLE_SERVER_SIDE_CURSORS``,
    which Django's documentation asks for behind one, or ``LISTEN_USING`` naming another
    alias for the wake-ups.
    """
    choice = headgate_settings.PREPARE_STATEMENTS
    if choice is not None:
        return bool(choice)
    options = conn.settings_dict.get("OPTIONS") or {}
    listen_using = headgate_settings.LISTEN_USING
    return not (
        "prepare_threshold" in options
        or "server_side_binding" in options
        or conn.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")
        or (listen_using is not None and listen_using != conn.alias)
    )


def _new(conn: BaseDatabaseWrapper) -> Any:
    """A fresh psycopg server-binding cursor on ``conn``'s connection, whose prepared
    statements are on where :func:`prepares_statements` says so."""
    from django.db.backends.postgresql import base

    raw = conn.connection
    if raw.prepare_threshold is None and prepares_statements(conn):
        raw.prepare_threshold = PREPARE_AFTER
    with conn.wrap_database_errors:
        return base.ServerBindingCursor(raw)  # type: ignore[call-arg]

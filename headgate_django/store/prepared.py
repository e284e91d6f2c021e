"""A cursor that binds parameters on the server, for the hot constant-text statements.

Django's psycopg cursors bind on the client: every ``execute`` scans the SQL text for
placeholders and quotes each parameter into it in Python, which was most of the time of a
1,000-job enqueue and a large part of each batched ack. A server-binding cursor sends the
text and the parameters apart (arrays in binary). Where a project enables prepared
statements (``OPTIONS["prepare_threshold"]``, off by default in Django so that
transaction-pooling proxies keep working), psycopg also prepares a statement once it has
run that many times on a connection, so PostgreSQL stops parsing and planning it.

It pays most for statements whose text never changes (array parameters instead of one
placeholder per row), and only on PostgreSQL; every other vendor gets Django's cursor.
The cursor is still wrapped by Django, so errors become ``django.db`` errors, the broken
transaction check applies and query logging and ``execute_wrapper`` still see it.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


def server_bound_cursor(conn: BaseDatabaseWrapper) -> CursorWrapper:
    """Like ``conn.cursor()``, but binding on the server when the connection is psycopg 3."""
    if conn.vendor != "postgresql":
        return conn.cursor()
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return conn.cursor()
    from django.db.backends.postgresql import base

    conn.close_if_health_check_failed()
    conn.ensure_connection()
    conn.validate_thread_sharing()
    with conn.wrap_database_errors:
        raw: Any = base.ServerBindingCursor(conn.connection)  # type: ignore[call-arg]
    return conn.make_debug_cursor(raw) if conn.queries_logged else conn.make_cursor(raw)

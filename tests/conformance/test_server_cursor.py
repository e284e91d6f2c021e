"""The kept server-binding cursor: reused per connection, yet still Django's cursor.

Each PostgreSQL connection hands out one psycopg cursor again and again for the hot
statements. These tests hold it to what a fresh Django cursor would do: errors arrive as
``django.db`` errors and leave it usable, ``execute_wrapper`` and the query log see every
statement, a nested use gets a cursor of its own, and a new connection gets a new cursor.
They also hold the store to preparing its statements by itself, and only its own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from headgate_django.store.prepared import PREPARE_AFTER, server_bound_cursor
from tests.app import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the server-binding cursor is PostgreSQL's; other vendors get Django's")


def _select(cursor, value: int) -> int:
    cursor.execute("SELECT %s::integer", [value])
    return cursor.fetchone()[0]


def test_the_same_cursor_serves_consecutive_uses():
    with server_bound_cursor(connection) as first:
        assert _select(first, 1) == 1
    with server_bound_cursor(connection) as second:
        assert _select(second, 2) == 2
    assert first is second
    assert not first.cursor.closed


def test_a_nested_use_gets_its_own_cursor_and_leaves_the_outer_results_alone():
    with server_bound_cursor(connection) as outer:
        outer.execute("SELECT generate_series(1, 3)")
        with server_bound_cursor(connection) as inner:
            assert inner is not outer
            assert _select(inner, 7) == 7
        assert inner.cursor.closed
        assert [row[0] for row in outer.fetchall()] == [1, 2, 3]


def test_a_new_connection_gets_a_new_cursor():
    with server_bound_cursor(connection) as before:
        _select(before, 1)
    connection.close()
    with server_bound_cursor(connection) as after:
        assert _select(after, 5) == 5
    assert after is not before


def test_errors_are_djangos_and_the_cursor_survives_them():
    job_id = tasks.noop.enqueue()
    with pytest.raises(IntegrityError), server_bound_cursor(connection) as cursor:
        cursor.execute(
            "INSERT INTO headgate_job (id) SELECT id FROM headgate_job WHERE id = %s", [job_id]
        )
    with server_bound_cursor(connection) as again:
        assert again is cursor
        assert _select(again, 3) == 3


def test_a_failed_statement_inside_atomic_still_marks_the_transaction():
    with transaction.atomic():
        with (
            pytest.raises(IntegrityError),
            transaction.atomic(),
            server_bound_cursor(connection) as cursor,
        ):
            cursor.execute("INSERT INTO headgate_job (id) VALUES (NULL)")
        # The savepoint was rolled back; the outer transaction goes on.
        with server_bound_cursor(connection) as cursor:
            assert _select(cursor, 4) == 4
    # An error leaving an atomic block without a savepoint breaks the transaction; the kept
    # cursor refuses the next statement just as Django's own would.
    with pytest.raises(TransactionManagementError), transaction.atomic():
        with (
            pytest.raises(IntegrityError),
            transaction.atomic(savepoint=False),
            server_bound_cursor(connection) as cursor,
        ):
            cursor.execute("INSERT INTO headgate_job (id) VALUES (NULL)")
        with server_bound_cursor(connection) as cursor:
            cursor.execute("SELECT 1")


def test_execute_wrappers_see_every_statement():
    seen: list[str] = []

    def spy(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        tasks.noop.enqueue()
        tasks.noop.enqueue()
    # Each enqueue is one insert; the only other statements are reads of the admission
    # policy, which a process repeats at most every quarter second (a slow machine may
    # see one before each enqueue).
    inserts = [sql for sql in seen if sql.startswith("INSERT INTO headgate_job")]
    others = [sql for sql in seen if sql not in inserts]
    assert len(inserts) == 2
    assert len(others) <= 2 and all("FROM headgate_queue_state" in sql for sql in others)


@pytest.mark.usefixtures("unprepared")
def test_the_query_log_sees_every_statement():
    with CaptureQueriesContext(connection) as queries:
        tasks.noop.enqueue()
        tasks.noop.enqueue()
    inserts = [q for q in queries.captured_queries if "INSERT INTO headgate_job" in q["sql"]]
    assert len(inserts) == 2


def test_a_connection_shared_between_threads_gets_a_cursor_per_use():
    connection.inc_thread_sharing()
    try:
        with server_bound_cursor(connection) as first:
            assert _select(first, 1) == 1
        with server_bound_cursor(connection) as second:
            assert _select(second, 2) == 2
    finally:
        connection.dec_thread_sharing()
    assert first is not second
    assert first.cursor.closed


@pytest.mark.usefixtures("unprepared")
def test_turning_the_query_log_on_reaches_a_connection_that_kept_a_cursor():
    with server_bound_cursor(connection) as kept:
        _select(kept, 1)
    with CaptureQueriesContext(connection) as queries, server_bound_cursor(connection) as logged:
        _select(logged, 2)
    assert logged is not kept
    # Bound on the server, the logged text keeps its placeholder.
    assert [q["sql"] for q in queries.captured_queries] == ["SELECT $1::integer"]


def test_async_code_is_refused_even_with_a_kept_cursor():
    import asyncio

    from django.core.exceptions import SynchronousOnlyOperation

    with server_bound_cursor(connection) as kept:
        _select(kept, 1)

    async def from_a_coroutine() -> None:
        server_bound_cursor(connection)

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(from_a_coroutine())


def test_a_due_health_check_replaces_a_dead_connection_and_its_cursor():
    from django.db import connections

    with server_bound_cursor(connection) as kept:
        _select(kept, 1)
    pid = connection.connection.info.backend_pid
    # Another connection ends this one's server process, as a restart or a proxy would.
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    connection.health_check_enabled, connection.health_check_done = True, False
    try:
        with server_bound_cursor(connection) as fresh:
            assert _select(fresh, 6) == 6
    finally:
        connection.health_check_enabled = False
    assert fresh is not kept
    assert connection.connection.info.backend_pid != pid


# Prepared statements: on by themselves for the store's statements, never for the ORM's, and
# off wherever the project has chosen or the alias shows a transaction pooler.


def _prepared_texts() -> list[str]:
    """What this session has prepared (Django's client-binding cursor never prepares)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _enqueue_and_query(times: int) -> None:
    for _ in range(times):
        tasks.noop.enqueue()
        User.objects.filter(username="nobody").exists()


@pytest.fixture
def fresh_connection() -> Iterator[dict]:
    """A new session for the test, and the alias's settings put back afterwards."""
    saved = copy.deepcopy(connection.settings_dict)
    connection.close()
    yield connection.settings_dict
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


def test_a_plain_alias_gets_the_store_statements_prepared_and_no_orm_query(fresh_connection):
    _enqueue_and_query(PREPARE_AFTER + 1)
    texts = _prepared_texts()
    assert any("headgate_job" in text for text in texts), texts
    assert not any("auth_user" in text for text in texts), texts
    assert connection.connection.prepare_threshold == PREPARE_AFTER


@pytest.mark.parametrize(
    ("alias", "headgate"),
    [
        ({"DISABLE_SERVER_SIDE_CURSORS": True}, {}),
        ({"OPTIONS": {"prepare_threshold": None}}, {}),
        ({"OPTIONS": {"server_side_binding": False}}, {}),
        ({}, {"PREPARE_STATEMENTS": False}),
        ({}, {"LISTEN_USING": "replica"}),
    ],
    ids=[
        "pooler-cursors-off",
        "threshold-chosen",
        "binding-chosen",
        "setting-off",
        "listen-elsewhere",
    ],
)
def test_nothing_is_prepared_where_the_project_chose_or_a_pooler_shows(
    fresh_connection, alias, headgate
):
    for key, value in alias.items():
        fresh_connection[key] = (
            {**fresh_connection.get(key, {}), **value} if key == "OPTIONS" else value
        )
    with override_settings(HEADGATE={**settings.HEADGATE, **headgate}):
        _enqueue_and_query(PREPARE_AFTER + 1)
        assert _prepared_texts() == []
        assert connection.connection.prepare_threshold is None


def test_the_setting_turns_them_on_over_an_explicit_none(fresh_connection):
    fresh_connection["OPTIONS"] = {**fresh_connection.get("OPTIONS", {}), "prepare_threshold": None}
    with override_settings(HEADGATE={**settings.HEADGATE, "PREPARE_STATEMENTS": True}):
        _enqueue_and_query(PREPARE_AFTER + 1)
        assert any("headgate_job" in text for text in _prepared_texts())

"""Which handler failures count as a lost connection (run again, uncharged) — only those
whose session is gone; ``tests/chaos/test_dropped_sessions.py`` kills real sessions."""

from __future__ import annotations

import contextlib

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, IntegrityError, OperationalError, connection, connections

from headgate_django import task
from headgate_django.models import Job
from headgate_django.worker import execute
from headgate_django.worker.runner import Worker

# transaction=True: no test-wide transaction, so close() really closes the connection.
pytestmark = pytest.mark.django_db(transaction=True)


def lost(exc: Exception, failed_on: object = None) -> bool:
    watch = execute._SessionWatch()
    watch.failed_on = failed_on
    return execute._connection_lost(exc, connection, watch)


def test_an_error_on_a_working_connection_is_the_jobs_failure() -> None:
    connection.ensure_connection()
    assert not lost(OperationalError("lock wait timeout"))
    # The failing query ran on the session the thread still holds, and it answers.
    assert not lost(OperationalError("lock wait timeout"), failed_on=connection.connection)
    assert not lost(IntegrityError("duplicate key"))
    assert not lost(ValueError("not a database error"))


def test_a_thread_without_a_connection_cannot_tell_and_charges_the_job() -> None:
    connection.close()
    assert not lost(OperationalError("server closed"))


def test_an_error_on_a_connection_that_no_longer_answers_is_a_lost_connection() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server session to lose")
    connection.ensure_connection()
    connection.connection.close()  # what a killed session looks like from this side
    try:
        assert lost(OperationalError("server closed"))
    finally:
        with contextlib.suppress(DatabaseError):  # MySQLdb refuses to close twice
            connection.close()


def test_a_session_django_replaced_after_the_failing_query_is_lost() -> None:
    """What ``atomic()`` leaves behind when its rollback fails on a dead session: Django
    dropped the connection and opened a new one, which answers."""
    connection.ensure_connection()
    failed_on = connection.connection
    connection.close()
    connection.ensure_connection()
    assert lost(OperationalError("server closed"), failed_on=failed_on)
    assert not lost(IntegrityError("duplicate key"), failed_on=failed_on)


def test_the_watch_records_the_session_of_a_failing_query() -> None:
    watch = execute._SessionWatch()
    with connection.execute_wrapper(watch), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert watch.failed_on is None
        with pytest.raises(DatabaseError):
            cursor.execute("SELECT * FROM headgate_no_such_table")
    # A missing table is a ProgrammingError (OperationalError on SQLite): only
    # connection-level errors are recorded.
    if connection.vendor == "sqlite":
        assert watch.failed_on is connection.connection
    else:
        assert watch.failed_on is None


LOSE_SESSION: list[bool] = []


@task(kind="test.lost-connection.orm-count", max_attempts=1)
def orm_count_on_a_dead_session(ctx) -> int:
    """Counts through the ORM once its session is gone (the first time only)."""
    if LOSE_SESSION:
        LOSE_SESSION.clear()
        connection.ensure_connection()
        connection.connection.close()
    return Job.objects.count()


def test_an_orm_query_on_a_dead_session_runs_again_uncharged() -> None:
    """On MySQL/MariaDB the ORM closes its cursor after the failed query, the close fails
    too, and the handler raises the driver's own ``OperationalError``, not Django's: it
    was charged as the job's failure (archived, its only attempt) where PostgreSQL ran it
    again."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server session to lose")
    job_id = orm_count_on_a_dead_session.enqueue()
    LOSE_SESSION.append(True)
    try:
        Worker(concurrency=1, burst=True, run_duties=False).run()
    finally:
        LOSE_SESSION.clear()
    row = Job.objects.get(pk=job_id)
    assert (row.state, row.attempt, row.crash_attempt, row.errors) == ("completed", 0, 0, [])


@task(kind="test.lost-connection.async-progress", max_attempts=5)
async def async_progress(ctx) -> None:
    await ctx.aset_progress(1, 2)


def _kill_session() -> None:
    connections["default"].ensure_connection()
    connections["default"].connection.close()


@task(kind="test.lost-connection.async-kill-session")
async def kill_the_sync_threads_session(ctx) -> None:
    """Close the driver connection under the thread this handler thread's async attempts
    run their sync code on (the one their fenced writes use), as a server restart would."""
    await sync_to_async(_kill_session)()


def test_async_handler_writes_recover_once_their_session_is_gone() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server session to lose")
    kill_the_sync_threads_session.enqueue()
    job_ids = [async_progress.enqueue() for _ in range(3)]
    Worker(concurrency=1, burst=True, run_duties=False).run()  # all four, in order
    outcomes = [Job.objects.get(pk=job_id).state for job_id in job_ids]
    # The write that finds the session dead fails its attempt; the next ones reconnect.
    assert outcomes == ["retryable", "completed", "completed"]

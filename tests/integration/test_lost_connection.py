"""Which handler failures count as a lost connection (run again, uncharged) — only those
whose connection no longer answers; ``tests/chaos/test_dropped_sessions.py`` kills real
sessions."""

from __future__ import annotations

import contextlib

import pytest
from django.db import DatabaseError, IntegrityError, OperationalError, connection

from headgate_django.worker import execute

# transaction=True: no test-wide transaction, so close() really closes the connection.
pytestmark = pytest.mark.django_db(transaction=True)


def test_an_error_on_a_working_connection_is_the_jobs_failure() -> None:
    connection.ensure_connection()
    assert not execute._connection_lost(OperationalError("lock wait timeout"), "default")
    assert not execute._connection_lost(IntegrityError("duplicate key"), "default")
    assert not execute._connection_lost(ValueError("not a database error"), "default")


def test_a_thread_without_a_connection_cannot_tell_and_charges_the_job() -> None:
    connection.close()
    assert not execute._connection_lost(OperationalError("server closed"), "default")


def test_an_error_on_a_connection_that_no_longer_answers_is_a_lost_connection() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server session to lose")
    connection.ensure_connection()
    connection.connection.close()  # what a killed session looks like from this side
    try:
        assert execute._connection_lost(OperationalError("server closed"), "default")
    finally:
        with contextlib.suppress(DatabaseError):  # MySQLdb refuses to close twice
            connection.close()

"""Migration 0011 swaps the generated unique-key column for a partial index (or, on
MySQL/MariaDB, keeps it): jobs written before it keep their keys, held or not, and it
unapplies cleanly."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from headgate_django import enqueue
from headgate_django.exceptions import DuplicateError
from headgate_django.models import Job
from tests.conformance.helpers import envelope

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("headgate_django", "0010_postgres_claim_function")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def _latest():
    executor = MigrationExecutor(connection)
    return [key for key in executor.loader.graph.leaf_nodes() if key[0] == "headgate_django"]


def _old_row(job_id: str, state: str, key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO headgate_job (id, kind, queue, priority, schema_version, payload, "
            "fingerprint, state, attempt, crash_attempt, max_attempts, scheduled_at, fence, "
            "claimed_by, enqueued_at, retention, unique_key, errors, checkpoint) "
            "VALUES (%s, 'test.noop', 'default', 0, 1, %s, %s, %s, 0, 0, 25, %s, 0, '', %s, "
            "%s, %s, '[]', '{}')",
            [
                job_id,
                b"{}",
                "f" * 32,
                state,
                "2026-01-01 00:00:00",
                "2026-01-01 00:00:00",
                _retention(),
                key,
            ],
        )


def _retention():
    # A day, in the column's own type: an interval, or microseconds elsewhere.
    return "1 day" if connection.vendor == "postgresql" else 86_400_000_000


def test_keys_written_before_the_swap_are_still_enforced_after_it():
    latest = _latest()
    try:
        _migrate(BEFORE)
        _old_row("old-live", "available", "nightly")
        _old_row("old-done", "completed", "nightly")
        _old_row("old-other", "completed", "weekly")
        _migrate(latest)
        assert Job.objects.filter(unique_key="nightly").count() == 2
        with pytest.raises(DuplicateError) as info:
            enqueue(envelope(unique_key="nightly"))
        assert info.value.existing_id == "old-live"
        [weekly] = enqueue(envelope(unique_key="weekly"))
        _migrate(BEFORE)  # and back: the old column is filled in again
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM headgate_job WHERE unique_live = 'weekly'")
            assert list(cursor.fetchall()) == [(weekly,)]
    finally:
        _migrate(latest)
    with pytest.raises(DuplicateError):
        enqueue(envelope(unique_key="weekly"))

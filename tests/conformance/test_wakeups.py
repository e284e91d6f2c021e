"""PostgreSQL wake-ups: which writes notify ``headgate_wakeup``, with what, and when.

Inserts notify from their own statement and updates through the trigger on ``UPDATE OF
state``, so each way a job can become available is checked here from a second connection
that ``LISTEN``s, the way a worker's listener does: every enqueue path, at commit and not
before, and nothing for a job that is not available yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from headgate_django import enqueue
from headgate_django.store import job_promote
from headgate_django.store.insert import WAKE_CHANNEL
from tests.app import tasks

pytestmark = pytest.mark.django_db(transaction=True)


class _Listener:
    def __init__(self, conn) -> None:
        self.conn = conn

    def payloads(self) -> list[str]:
        """The notifications delivered so far (waiting briefly for any in flight)."""
        return [n.payload for n in self.conn.notifies(timeout=0.3)]


@pytest.fixture
def listener() -> Iterator[_Listener]:
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite's watcher and MySQL's polling differ")
    import psycopg

    connection.ensure_connection()
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as conn:
        conn.execute(f"LISTEN {WAKE_CHANNEL}")
        yield _Listener(conn)


def test_a_single_enqueue_notifies_its_queue(listener):
    tasks.noop.enqueue()
    assert listener.payloads() == ["default"]


def test_a_single_enqueue_in_a_transaction_notifies_at_commit(listener):
    with transaction.atomic():
        tasks.noop.enqueue()
        assert listener.payloads() == []
    assert listener.payloads() == ["default"]


def test_a_rolled_back_enqueue_notifies_nothing(listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.noop.enqueue()
        raise RuntimeError("roll back")
    assert listener.payloads() == []


def test_a_batch_notifies_each_queue_once(listener):
    base = tasks.noop.envelope()
    enqueue([base, base, replace(base, queue="mail"), replace(base, queue="mail")])
    assert sorted(listener.payloads()) == ["default", "mail"]


@pytest.mark.parametrize(
    "timing",
    [{"delay": timedelta(minutes=5)}, {"pending": True}],
    ids=["delayed", "pending"],
)
def test_a_job_that_is_not_available_yet_notifies_nothing(listener, timing):
    enqueue(replace(tasks.noop.envelope(), **timing))
    enqueue([replace(tasks.noop.envelope(), **timing)] * 2)
    assert listener.payloads() == []


def test_a_due_instant_notifies_and_a_future_one_does_not(listener):
    now = timezone.now()
    enqueue(replace(tasks.noop.envelope(), scheduled_at=now + timedelta(hours=1)))
    assert listener.payloads() == []
    enqueue(replace(tasks.noop.envelope(), scheduled_at=now - timedelta(seconds=1)))
    assert listener.payloads() == ["default"]


def test_rows_inserted_after_classifying_notify(listener):
    """An idempotent repeat sends a batch through the classifying path (the one-statement
    insert refuses a taken id); the batch's new job is inserted there, and still wakes."""
    first = replace(tasks.noop.envelope(), id="wake-repeat-1")
    enqueue(first)
    assert listener.payloads() == ["default"]
    enqueue([first, replace(tasks.noop.envelope(), id="wake-repeat-2", queue="mail")])
    assert listener.payloads() == ["mail"]


def test_a_promotion_notifies_through_the_update_trigger(listener):
    job_id = enqueue(replace(tasks.noop.envelope(), pending=True))[0]
    assert listener.payloads() == []
    job_promote(job_id)
    assert listener.payloads() == ["default"]

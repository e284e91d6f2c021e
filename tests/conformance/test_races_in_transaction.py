"""Racing enqueues where the loser runs inside a transaction of its own that read the
table before the winner committed. The loser must still see the winner once it loses the
race on the unique index: on PostgreSQL and MySQL/MariaDB in READ COMMITTED each statement
reads afresh (under REPEATABLE READ MySQL/MariaDB would read the old snapshot and fail
with ``IdConflictError``, which is why ``headgate.W004`` asks for READ COMMITTED); SQLite
serialises the writers."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from headgate_django import DuplicateError, Envelope, enqueue
from headgate_django.models import Job
from tests.conformance.helpers import wait_for_lock_wait


def _winner_commits_after(env: Envelope, holding: threading.Event, go: threading.Event):
    """Another connection enqueues ``env`` and holds its transaction open until ``go``."""

    def run() -> None:
        try:
            with transaction.atomic():
                enqueue(env)
                holding.set()
                go.wait(timeout=30)
                wait_for_lock_wait()  # the loser is waiting on the unique index
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert holding.wait(timeout=30)
    return thread


def _race(winner_env: Envelope, loser_env: Envelope) -> list[str]:
    """Enqueue ``loser_env`` in a transaction that read the table before the winner
    committed, while the winner holds the same id or key uncommitted."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers: the loser's transaction holds the write lock")
    holding, go = threading.Event(), threading.Event()
    winner = None
    try:
        with transaction.atomic():
            assert Job.objects.count() == 0  # this transaction's first read
            winner = _winner_commits_after(winner_env, holding, go)
            go.set()
            return enqueue(loser_env)
    finally:
        go.set()
        if winner is not None:
            winner.join()


@pytest.mark.django_db(transaction=True)
def test_an_idempotent_repeat_in_a_transaction_is_a_no_op_when_it_loses_the_race():
    env = Envelope(kind="test.noop", id="order-1", payload=b'{"args":[],"kwargs":{"n":1}}')
    assert _race(env, env) == ["order-1"]
    assert list(Job.objects.values_list("id", flat=True)) == ["order-1"]


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_unique_key_in_a_transaction_names_the_winner_when_it_loses_the_race():
    with pytest.raises(DuplicateError) as info:
        _race(
            Envelope(kind="test.noop", id="first", unique_key="nightly"),
            Envelope(kind="test.noop", id="second", unique_key="nightly"),
        )
    assert info.value.existing_id == "first"
    assert list(Job.objects.values_list("id", flat=True)) == ["first"]

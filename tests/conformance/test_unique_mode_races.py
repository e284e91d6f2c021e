"""Debounce and replace under a race: two enqueues of one key where neither sees a holder
when it looks. The one that loses the insert must then treat the winner as the holder it
would have found a moment later (debounce into it, or give it the new values), not fail
with ``DuplicateError``: a burst of debounced enqueues is what debounce is for."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from headgate_django import Envelope, enqueue, store
from headgate_django.enqueue import enqueue_one
from headgate_django.models import Job
from tests.conformance.helpers import wait_for_lock_wait


def _winner_holds(env: Envelope) -> threading.Thread:
    """Another connection enqueues ``env`` and commits once an enqueue of the same key
    waits on the unique index: that one found no holder, and then loses there."""
    holding = threading.Event()

    def run() -> None:
        try:
            with transaction.atomic():
                enqueue(env)
                holding.set()
                wait_for_lock_wait()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert holding.wait(timeout=30)
    return thread


@pytest.mark.parametrize(
    "mode",
    [{"unique_debounce": timedelta(seconds=30)}, {"unique_replace": frozenset({"payload"})}],
    ids=["debounce", "replace"],
)
@pytest.mark.django_db(transaction=True)
def test_the_loser_of_a_race_takes_over_the_winner(mode):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers: the second enqueue waits and finds a holder")
    first = Envelope(kind="test.noop", id="first", unique_key="burst", payload=b"1", **mode)
    second = Envelope(kind="test.noop", id="second", unique_key="burst", payload=b"2", **mode)
    winner = _winner_holds(first)
    try:
        done = enqueue_one(second)
    finally:
        winner.join()
    assert done == store.Inserted("first", True)
    assert list(Job.objects.values_list("id", "payload")) == [("first", b"2")]


@pytest.mark.django_db(transaction=True)
def test_racing_throttled_enqueues_of_one_caller_id_are_idempotent():
    """The same job enqueued twice at once: the loser finds its own id holding the window
    (as an enqueue a moment later would) and is the idempotent repeat, not a duplicate."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers: the second enqueue waits and finds a holder")
    env = Envelope(
        kind="test.noop", id="order-1", unique_key="order", unique_window=timedelta(minutes=1)
    )
    winner = _winner_holds(env)
    try:
        assert enqueue(env) == ["order-1"]
    finally:
        winner.join()
    assert list(Job.objects.values_list("id", flat=True)) == ["order-1"]

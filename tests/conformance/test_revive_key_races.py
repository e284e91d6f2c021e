"""Bringing a finished job back to life while an enqueue takes its unique key.

An operator retry (or a quarantine release) checks that no live job holds the job's
unique key, then makes it live. An enqueue of that key landing between the two (not yet
committed at the check) made the update fail on the unique index: the operator got a
raw ``IntegrityError`` (HTTP 500 over the API) instead of the ``DuplicateError`` (409)
naming the holder that the same situation gives without the race.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection

from headgate_django import DuplicateError, enqueue, store
from headgate_django.kernel.states import State
from headgate_django.store.bulk import job_bulk_chunk
from tests.conformance.helpers import envelope, job_in_state, race_behind_a_lock, row

VERBS: dict[str, tuple[State, Callable[[str], object]]] = {
    "operator retry": (State.ARCHIVED, store.job_operator_retry),
    "quarantine release": (
        State.QUARANTINED,
        lambda job_id: store.quarantine_release(row(job_id)["fingerprint"]),
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_key_taken_during_the_revival_is_a_duplicate_error(verb):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    state, revive = VERBS[verb]
    old, _ = job_in_state(state, unique_key="nightly")
    before = row(old)
    taken: list[str] = []
    errors = race_behind_a_lock(
        lambda: taken.extend(enqueue(envelope(unique_key="nightly"))),
        lambda: revive(old),  # waits on the key the enqueue holds
    )
    (error,) = errors
    assert isinstance(error, DuplicateError), repr(error)
    assert error.existing_id == taken[0]
    assert row(old) == before


@pytest.mark.django_db(transaction=True)
def test_a_bulk_retry_skips_a_job_whose_key_is_taken_during_it():
    """A bulk retry skips a job whose key a live job holds; the race made it fail the
    whole chunk with an ``IntegrityError`` instead (the bulk job retried it in vain)."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    old, _ = job_in_state(State.ARCHIVED, unique_key="nightly")
    other, _ = job_in_state(State.ARCHIVED)
    before = row(old)
    changed: list[int] = []
    errors = race_behind_a_lock(
        lambda: enqueue(envelope(unique_key="nightly")),
        lambda: changed.append(job_bulk_chunk("retry", [old, other])),
    )
    assert errors == []
    assert changed == [1]
    assert row(old) == before
    assert row(other)["state"] == "available"

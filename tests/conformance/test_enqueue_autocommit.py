"""Enqueue outside any transaction. On PostgreSQL one statement inserts the whole batch (on
SQLite and MySQL/MariaDB, a single job) and the classifying path runs only when something opposes it; every refusal must still be the
precise error, and a refused batch must leave none of its rows behind."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from headgate_django import enqueue, store
from headgate_django.exceptions import DuplicateError, IdConflictError, QuarantinedError
from headgate_django.models import Job, Quarantine
from tests.app import tasks
from tests.conformance.helpers import envelope

pytestmark = pytest.mark.django_db(transaction=True)


def _quarantine(env) -> None:
    Quarantine.objects.create(
        fingerprint=env.fingerprint, kind=env.kind, quarantined_at=timezone.now()
    )


@pytest.mark.parametrize("size", [1, 3])
def test_a_quarantined_fingerprint_refuses_the_whole_batch(size):
    bad = tasks.echo.envelope(value="poison")
    _quarantine(bad)
    batch = [envelope() for _ in range(size - 1)] + [bad]
    with pytest.raises(QuarantinedError) as info:
        enqueue(batch)
    assert info.value.fingerprint == bad.fingerprint
    assert Job.objects.count() == 0


def test_a_quarantined_job_refused_inside_a_transaction_leaves_the_transaction_usable():
    bad = tasks.echo.envelope(value="poison")
    _quarantine(bad)
    with transaction.atomic():
        [kept] = enqueue(envelope())
        with pytest.raises(QuarantinedError):
            enqueue(bad)
        [also] = enqueue(envelope())
    assert sorted(Job.objects.values_list("id", flat=True)) == sorted([kept, also])


@pytest.mark.parametrize("size", [1, 3])
def test_a_taken_id_with_other_content_refuses_the_whole_batch(size):
    enqueue(dataclasses.replace(tasks.echo.envelope(value=1), id="taken"))
    other = dataclasses.replace(tasks.echo.envelope(value=2), id="taken")
    with pytest.raises(IdConflictError) as info:
        enqueue([envelope() for _ in range(size - 1)] + [other])
    assert info.value.details == {"id": "taken"}
    assert list(Job.objects.values_list("id", flat=True)) == ["taken"]


@pytest.mark.parametrize("size", [1, 3])
def test_a_held_unique_key_refuses_the_whole_batch_naming_the_holder(size):
    [holder] = enqueue(envelope(unique_key="nightly"))
    with pytest.raises(DuplicateError) as info:
        enqueue([envelope() for _ in range(size - 1)] + [envelope(unique_key="nightly")])
    assert info.value.existing_id == holder
    assert list(Job.objects.values_list("id", flat=True)) == [holder]


def test_an_idempotent_repeat_in_a_batch_inserts_only_the_new_rows():
    again = dataclasses.replace(tasks.echo.envelope(value=1), id="again")
    assert enqueue(again) == ["again"]
    assert enqueue(again) == ["again"]
    ids = enqueue([envelope(id="new-1"), again, envelope(id="new-2")])
    assert ids == ["new-1", "again", "new-2"]
    assert sorted(Job.objects.values_list("id", flat=True)) == ["again", "new-1", "new-2"]


def test_a_batch_applies_each_rows_own_timing_on_the_store_clock():
    now = store.db_now()
    past, future = now - timedelta(hours=1), now + timedelta(hours=1)
    ids = enqueue(
        [
            envelope(),
            envelope(pending=True),
            envelope(delay=timedelta(hours=2)),
            envelope(delay=timedelta(0)),
            envelope(delay=timedelta(microseconds=900)),
            envelope(scheduled_at=past),
            envelope(scheduled_at=future),
            envelope(priority=7, max_attempts=3, timeout=timedelta(seconds=9)),
        ]
    )
    rows = {j.id: j for j in Job.objects.filter(id__in=ids)}
    now_job, pending, delayed, no_delay, sub_ms, due, later, custom = (rows[i] for i in ids)
    assert [r.state for r in (now_job, pending, delayed, no_delay, sub_ms, due, later)] == [
        "available",
        "pending",
        "scheduled",
        "available",
        "available",
        "available",
        "scheduled",
    ]
    assert (due.scheduled_at, later.scheduled_at) == (past, future)
    assert timedelta(hours=2) <= delayed.scheduled_at - now < timedelta(hours=2, minutes=1)
    assert abs(now_job.scheduled_at - now) < timedelta(minutes=1)
    assert (custom.priority, custom.max_attempts, custom.timeout) == (
        7,
        3,
        timedelta(seconds=9),
    )
    assert all(r.attempt == r.crash_attempt == r.fence == 0 for r in rows.values())
    assert all(r.errors == [] and r.checkpoint == {} for r in rows.values())
    assert datetime(2020, 1, 1, tzinfo=UTC) < now_job.enqueued_at


SHAPES = {
    "defaults": {},
    "limits": {
        "priority": -7,
        "schema_version": 3,
        "max_attempts": 2,
        "timeout": timedelta(seconds=1.5),
        "retention": timedelta(0),
    },
    "pending": {"pending": True, "priority": 2**31 - 1},
    "delay": {"delay": timedelta(minutes=5)},
    "sub-millisecond delay": {"delay": timedelta(microseconds=900)},
    "at": {"scheduled_at": datetime(2031, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)},
    "keyed workflow job": {"unique_key": "k:1%'s", "workflow_id": "wf-%s-'1'"},
    "queue": {"queue": "odd_queue.name:with-dashes"},
}
_SAME_COLUMNS = [
    "kind",
    "queue",
    "priority",
    "schema_version",
    "payload",
    "fingerprint",
    "state",
    "attempt",
    "crash_attempt",
    "max_attempts",
    "timeout",
    "fence",
    "claimed_by",
    "retention",
    "unique_key",
    "errors",
    "checkpoint",
    "workflow_id",
]


@pytest.mark.parametrize("in_transaction", [False, True], ids=["alone", "in-transaction"])
@pytest.mark.parametrize("fields", SHAPES.values(), ids=SHAPES.keys())
def test_one_job_is_stored_exactly_as_the_same_job_in_a_batch(fields, in_transaction):
    """On PostgreSQL a single job has a statement of its own, with its shape written in as
    constants, and on SQLite and MySQL/MariaDB one that refuses in a single statement;
    every column it stores must match the batch statement's."""
    env = envelope(kind="test.echo", payload=b'{"args":[1],"kwargs":{}}', **fields)
    with transaction.atomic() if in_transaction else contextlib.nullcontext():
        [one] = enqueue(env)
        [_, batched] = enqueue([envelope(), dataclasses.replace(env, unique_key=None)])
    rows = {r["id"]: r for r in Job.objects.filter(pk__in=[one, batched]).values()}
    got, want = rows[one], {**rows[batched], "unique_key": env.unique_key}
    assert {c: got[c] for c in _SAME_COLUMNS} == {c: want[c] for c in _SAME_COLUMNS}
    assert abs(got["scheduled_at"] - want["scheduled_at"]) < timedelta(seconds=5)
    if env.scheduled_at is not None:
        assert got["scheduled_at"] == env.scheduled_at

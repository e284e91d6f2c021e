"""Store clock: every deciding instant comes from the database, never from the worker.

The test process's clock is pushed three hours ahead (``time.time``, ``time.time_ns`` and
Django's ``timezone.now``). Every instant the store writes must still sit next to
``store.db_now()`` (read with SQL, so the skew cannot reach it) and hours away from the
skewed Python clock.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from headgate_django import store
from headgate_django.kernel.states import State
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import (
    claim,
    enqueue_job,
    job_in_state,
    near,
    row,
    state_of,
)

pytestmark = pytest.mark.django_db

SKEW = timedelta(hours=3)


@pytest.fixture
def skewed_clock(monkeypatch) -> None:
    """The worker's clock runs three hours fast."""
    real_time, real_time_ns, real_now = time.time, time.time_ns, timezone.now
    monkeypatch.setattr(time, "time", lambda: real_time() + SKEW.total_seconds())
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + int(SKEW.total_seconds() * 1e9))
    monkeypatch.setattr(timezone, "now", lambda: real_now() + SKEW)
    # The skew is real for Python code, and invisible to the database.
    assert timezone.now() - store.db_now() > SKEW - timedelta(minutes=1)


def python_now() -> datetime:
    return timezone.now()


def from_store_clock(instant: datetime, offset: timedelta = timedelta(0)) -> bool:
    """``instant`` is store-now + offset, and not worker-now + offset."""
    return near(instant, store.db_now() + offset) and not near(instant, python_now() + offset)


def test_enqueue_stamps(skewed_clock):
    now_id = enqueue_job()
    later_id = enqueue_job(delay=timedelta(minutes=20))
    now_row, later_row = row(now_id), row(later_id)
    assert from_store_clock(now_row["enqueued_at"])
    assert from_store_clock(now_row["scheduled_at"])
    assert from_store_clock(later_row["enqueued_at"])
    assert from_store_clock(later_row["scheduled_at"], timedelta(minutes=20))


def test_an_absolute_schedule_is_compared_with_the_store_clock(skewed_clock):
    # One hour ahead of the store is in the past for the skewed worker: still scheduled.
    job_id = enqueue_job(scheduled_at=store.db_now() + timedelta(hours=1))
    assert state_of(job_id) == "scheduled"
    assert store.job_promote_due() == 0
    assert state_of(job_id) == "scheduled"


def test_lease_expiry_and_renewal(skewed_clock):
    job_id = enqueue_job()
    claimed = claim(job_id, lease_ttl=timedelta(minutes=10))
    assert from_store_clock(row(job_id)["claimed_at"])
    assert from_store_clock(row(job_id)["lease_expires_at"], timedelta(minutes=10))
    # Ten minutes of lease is long past on the worker's clock; not on the store's.
    assert store.job_reclaim_expired().retried == []
    assert state_of(job_id) == "running"
    store.job_renew_leases([claimed.ref], lease_ttl=timedelta(minutes=30))
    assert from_store_clock(row(job_id)["lease_expires_at"], timedelta(minutes=30))


@override_settings(
    HEADGATE={"BACKOFF_BASE": timedelta(minutes=10), "BACKOFF_CAP": timedelta(hours=1)}
)
def test_backoff_is_added_to_the_store_clock(skewed_clock):
    _, claimed = job_in_state(State.RUNNING)
    assert store.job_retry(claimed.ref, error="boom") is State.RETRYABLE
    after = row(claimed.ref.job_id)
    # First retry: base * 2**0 plus jitter in [0, base): between 10 and 20 minutes.
    low, high = store.db_now() + timedelta(minutes=10), store.db_now() + timedelta(minutes=20)
    assert low - timedelta(seconds=5) <= after["scheduled_at"] <= high + timedelta(seconds=5)
    assert not near(after["scheduled_at"], python_now(), slack=timedelta(hours=1))
    assert from_store_clock(datetime.fromisoformat(after["errors"][0]["at"]))
    assert store.job_promote_due() == 0


def test_explicit_retry_delay_and_snooze(skewed_clock):
    _, first = job_in_state(State.RUNNING)
    store.job_retry(first.ref, error="boom", delay=timedelta(minutes=7))
    assert from_store_clock(row(first.ref.job_id)["scheduled_at"], timedelta(minutes=7))
    _, second = job_in_state(State.RUNNING)
    store.job_snooze(second.ref, delay=timedelta(minutes=40))
    assert from_store_clock(row(second.ref.job_id)["scheduled_at"], timedelta(minutes=40))
    assert store.job_promote_due() == 0


def test_finalisation_and_retention(skewed_clock):
    _, claimed = job_in_state(State.RUNNING, retention=timedelta(hours=1))
    store.job_complete_many([Completion(claimed.ref, None)])
    after = row(claimed.ref.job_id)
    assert from_store_clock(after["finalized_at"])
    assert from_store_clock(after["expires_at"], timedelta(hours=1))
    # Its retention has lapsed on the worker's clock, not on the store's.
    assert store.job_evict_retained() == {}
    assert state_of(claimed.ref.job_id) == "completed"


def test_operator_verbs(skewed_clock):
    pending, _ = job_in_state(State.PENDING)
    store.job_reschedule(pending, delay=timedelta(minutes=5))
    assert from_store_clock(row(pending)["scheduled_at"], timedelta(minutes=5))
    store.job_promote(pending)
    assert from_store_clock(row(pending)["scheduled_at"])
    cancelled, _ = job_in_state(State.AVAILABLE)
    store.job_cancel(cancelled)
    assert from_store_clock(row(cancelled)["finalized_at"])


def test_duty_leases(skewed_clock):
    from headgate_django.models import DutyLease

    assert store.duty_acquire("promote", holder="a", ttl=timedelta(minutes=10))
    assert from_store_clock(
        DutyLease.objects.get(pk="promote").lease_expires_at, timedelta(minutes=10)
    )
    assert not store.duty_acquire("promote", holder="b", ttl=timedelta(minutes=10))


@pytest.mark.parametrize("micros", [0, 123_000, 999_000])
def test_sqlite_instants_have_djangos_text_form(micros):
    """SQLite compares instants as text, so the store clock must write them the way Django
    does: a job Django scheduled for millisecond T is due when the clock reads T."""
    from django.db import connection

    from headgate_django.store import vendor

    if connection.vendor != "sqlite":
        pytest.skip("only SQLite keeps instants as text")
    at = datetime(2026, 11, 30, 6, 0, 3, micros)
    django_form = connection.ops.adapt_datetimefield_value(at)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {vendor.sqlite_instant('%s')}, {vendor.sqlite_instant('%s')} >= %s",
            [django_form, django_form, django_form],
        )
        store_form, due = cursor.fetchone()
    assert due == 1
    assert datetime.fromisoformat(store_form) == at
    if micros:
        assert store_form == django_form

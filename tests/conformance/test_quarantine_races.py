"""Two reclaim passes at once quarantining the same fingerprint.

The reclaim duty runs once at a time while its duty lease holds, but a pass that
outlives the lease (a slow database) overlaps the next runner's. Each takes other
expired jobs (``SKIP LOCKED``); two of them with one fingerprint, both at the crash
limit, both quarantine it. The second checked for the quarantine row before the first
committed it, then failed on the primary key: its whole batch rolled back and the duty
failed with an ``IntegrityError``, the batch left for the next pass.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test import override_settings

from headgate_django import store
from headgate_django.envelope import fingerprint
from headgate_django.models import Quarantine
from headgate_django.store.maintenance import ReclaimReport
from tests.conformance.helpers import (
    BLINK,
    claim,
    enqueue_job,
    expire_lease,
    race_behind_a_lock,
    state_of,
    unique_payload,
)


@pytest.mark.django_db(transaction=True)
@override_settings(HEADGATE={"CRASH_LIMIT": 1})
def test_two_reclaim_passes_quarantining_one_fingerprint_both_succeed():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    payload = unique_payload()
    fp = fingerprint("test.noop", payload)
    jobs = [enqueue_job(payload=payload) for _ in range(2)]
    for job_id in jobs:
        claim(job_id, lease_ttl=BLINK)
    expire_lease()
    reports: list[ReclaimReport] = []
    errors = race_behind_a_lock(
        # The first pass quarantines through one job; the second waits on the quarantine
        # row's key.
        lambda: reports.append(store.job_reclaim_expired(limit=1)),
        lambda: reports.append(store.job_reclaim_expired(limit=1)),
    )
    assert errors == []
    assert [r.quarantined for r in reports] == [[fp], [fp]]
    assert [state_of(job_id) for job_id in jobs] == ["quarantined", "quarantined"]
    assert list(Quarantine.objects.values_list("fingerprint", flat=True)) == [fp]


@pytest.mark.django_db
@override_settings(HEADGATE={"CRASH_LIMIT": 1})
def test_one_pass_quarantining_a_fingerprint_twice_keeps_the_first_row():
    payload = unique_payload()
    fp = fingerprint("test.noop", payload)
    jobs = [enqueue_job(payload=payload) for _ in range(2)]
    for job_id in jobs:
        claim(job_id, lease_ttl=BLINK)
    expire_lease()
    report = store.job_reclaim_expired()
    assert report.quarantined == [fp, fp]
    assert [state_of(job_id) for job_id in jobs] == ["quarantined", "quarantined"]
    assert Quarantine.objects.get().sample_job_id in jobs


@pytest.mark.django_db(transaction=True)
@override_settings(HEADGATE={"CRASH_LIMIT": 1})
def test_a_job_enqueued_while_its_fingerprint_was_being_quarantined_is_caught_next_pass():
    """The enqueue probes the quarantine in its own statement, which cannot see a
    quarantine not yet committed; the reclaim's move of the fingerprint's waiting jobs
    cannot see the job not yet committed. The job slipped through as available, to
    crash workers again up to the crash limit. The next pass now quarantines it."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    payload = unique_payload()
    fp = fingerprint("test.noop", payload)
    claim(enqueue_job(payload=payload), lease_ttl=BLINK)
    expire_lease()
    holding, go, errors, late = threading.Event(), threading.Event(), [], []

    def reclaim_pass() -> None:
        try:
            with transaction.atomic():
                assert store.job_reclaim_expired().quarantined == [fp]
                holding.set()
                assert go.wait(timeout=30)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def enqueue_meanwhile() -> None:
        try:
            late.append(enqueue_job(payload=payload))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=reclaim_pass)
    first.start()
    try:
        assert holding.wait(timeout=30)
        second = threading.Thread(target=enqueue_meanwhile)
        second.start()
        second.join(timeout=10)
    finally:
        go.set()
        first.join()
    second.join()
    assert errors == []
    (job_id,) = late
    assert state_of(job_id) == "available"  # the race: neither side saw the other
    store.job_reclaim_expired()
    assert state_of(job_id) == "quarantined"
    assert store.quarantine_release(fp) == 2
    assert state_of(job_id) == "available"

"""A lease renewal must not leave a worker's other jobs unrenewed while it waits for one
job's row.

A handler inside ``ctx.once`` holds its own job's row locked for as long as its function
runs. The worker's renewal covers every job it holds, in one transaction that locks the
rows in id order: waiting there for the ``once`` job, it had not yet extended the jobs
after it, whose leases then lapsed although the worker was alive and renewing on time.
The reclaim duty counted them as crashes and handed them to another worker: the same job
ran twice at once.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from headgate_django import Envelope, enqueue, store
from headgate_django.models import Job
from headgate_django.store.effects import job_effect_once

SHORT = timedelta(seconds=2)


@pytest.mark.django_db(transaction=True)
def test_a_renewal_waiting_for_a_locked_row_still_renews_the_rest():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    queue = "renew-behind-lock"
    enqueue([Envelope(kind="test.noop", id=i, queue=queue) for i in ("a-once", "b-other")])
    claimed = {
        c.ref.job_id: c.ref
        for c in store.job_claim(worker_id="w1", limit=2, lease_ttl=SHORT, queues=[queue])
    }
    assert set(claimed) == {"a-once", "b-other"}
    in_once, errors = threading.Event(), []

    def run_once() -> None:
        def slow() -> int:
            in_once.set()
            time.sleep(4)  # longer than what is left of the leases
            return 1

        try:
            job_effect_once(claimed["a-once"], "slow", slow)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    lost: list[set[str]] = []

    def renew() -> None:
        try:
            lost.append(
                store.job_renew_leases(list(claimed.values()), lease_ttl=timedelta(minutes=5))
            )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    handler = threading.Thread(target=run_once)
    handler.start()
    assert in_once.wait(timeout=30)
    renewer = threading.Thread(target=renew)
    renewer.start()  # on time: both leases still have most of their 2 s
    try:
        time.sleep(2.5)  # past the leases the claim granted
        report = store.job_reclaim_expired()
    finally:
        handler.join()
        renewer.join()
    assert errors == []
    assert report.retried == []
    assert lost == [set()]
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}


@pytest.mark.django_db(transaction=True)
def test_a_locked_row_does_not_hold_up_the_next_renewals():
    """The renewal waited for the ``once`` job's row once it had renewed the others: the
    worker's renewal thread was stuck there for as long as the function ran, so the next
    renewals of the other jobs never came, their leases lapsed and the reclaim duty took
    them from a live worker. A row held by another transaction is now left for the next
    renewal (neither renewed nor lost), and the ``once`` keeps its job's lease margin."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    queue = "renew-not-stuck"
    enqueue([Envelope(kind="test.noop", id=i, queue=queue) for i in ("a-once", "b-other")])
    refs = [
        c.ref for c in store.job_claim(worker_id="w1", limit=2, lease_ttl=SHORT, queues=[queue])
    ]
    once_ref = next(r for r in refs if r.job_id == "a-once")
    in_once, stop, errors, lost = threading.Event(), threading.Event(), [], []

    def run_once() -> None:
        def slow() -> int:
            in_once.set()
            time.sleep(4)  # twice the lease
            return 1

        try:
            job_effect_once(once_ref, "slow", slow)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def renewal_thread() -> None:
        """The worker's: renew every held lease a few times per lease."""
        try:
            while not stop.is_set():
                lost.append(store.job_renew_leases(refs, lease_ttl=SHORT))
                stop.wait(0.5)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    handler = threading.Thread(target=run_once)
    handler.start()
    assert in_once.wait(timeout=30)
    renewer = threading.Thread(target=renewal_thread)
    renewer.start()
    reports = []
    try:
        time.sleep(2.5)  # past the leases the claim granted, the function still running
        reports.append(store.job_reclaim_expired())
        handler.join()
        time.sleep(0.1)
        reports.append(store.job_reclaim_expired())  # right after the function committed
    finally:
        stop.set()
        handler.join()
        renewer.join()
    assert errors == []
    assert [r.retried for r in reports] == [[], []]
    assert all(found == set() for found in lost)
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}


@pytest.mark.django_db(transaction=True)
def test_a_once_longer_than_the_lease_leaves_its_job_leased():
    """No renewal touches the row while ``once`` holds it; its commit gives the lease
    back the margin it had when the function began, so the reclaim duty does not take
    the job in the moment before the worker's next renewal."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    enqueue(Envelope(kind="test.noop", id="long-once", queue="long-once"))
    (claimed,) = store.job_claim(worker_id="w1", limit=1, lease_ttl=SHORT, queues=["long-once"])

    def slow() -> int:
        time.sleep(2.5)  # longer than the lease
        return 1

    assert job_effect_once(claimed.ref, "slow", slow) == 1
    assert store.job_reclaim_expired().retried == []
    job = Job.objects.get(pk="long-once")
    assert job.state == "running"
    assert job.lease_expires_at > store.db_now() + timedelta(seconds=1)

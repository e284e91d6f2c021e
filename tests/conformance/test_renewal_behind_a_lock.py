"""A lease renewal must not leave a worker's other jobs unrenewed while one job's row is
locked.

A handler inside ``ctx.once`` holds its own job's row locked for as long as its function
runs. A renewal that waited for that row would not extend the worker's other leases
meanwhile: they would lapse although the worker was alive and renewing on time, and the
reclaim duty would hand them to another worker, so the same job ran twice at once.
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
def test_a_locked_row_does_not_hold_up_the_next_renewals():
    """A renewal that waited for the ``once`` job's row, even after renewing the others,
    would keep the worker's renewal thread there for as long as the function ran: the next
    renewals of the other jobs would never come. A row held by another transaction is left
    for the next renewal (neither renewed nor lost), and the ``once`` keeps its job's lease
    margin."""
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
    granted = Job.objects.get(pk="long-once").lease_expires_at

    def slow() -> int:
        time.sleep(2.5)  # longer than the lease
        return 1

    assert job_effect_once(claimed.ref, "slow", slow) == 1
    assert store.job_reclaim_expired().retried == []
    job = Job.objects.get(pk="long-once")
    assert job.state == "running"
    # Moved on by the time the function held the row (the margin comes back whole),
    # measured on the store clock, so no delay before or after the once can upset it.
    assert job.lease_expires_at >= granted + timedelta(seconds=2.5)

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

"""A batch lease renewal locks its rows in id order, so it never holds an execution's
workflow task while it waits for that execution's Operation job: recording an Operation's
outcome locks the job, then the header, then the task, and a renewal holding the task
first deadlocked with it (a worker renews both while it runs an Operation eagerly)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from headgate_django import store
from headgate_django.envelope import Envelope
from headgate_django.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_renewal_never_holds_the_task_while_it_waits_for_the_operation() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has one writer at a time: no row locks to order")
    # As in a busy worker: the task was enqueued long before its Operation, and the
    # renewal holds many other leases too.
    ids = ["x:task", *(f"other:{n:03}" for n in range(300)), "x:op:1"]
    store.job_insert_many([Envelope(kind="tests.renew", id=i, payload=b"[[], {}]") for i in ids])
    claimed = store.job_claim(worker_id="w", limit=len(ids), lease_ttl=timedelta(seconds=30))
    refs = {job.ref.job_id: job.ref for job in claimed}
    held = [refs[i] for i in ids]
    lost: list[set[str]] = []

    def renew() -> None:
        try:  # the task first, as a worker lists it: its handler is the older one
            lost.append(store.job_renew_leases(held, lease_ttl=timedelta(seconds=60)))
        finally:
            connections.close_all()

    with transaction.atomic():
        Job.objects.select_for_update().get(pk="x:op:1")  # an outcome being recorded
        renewal = threading.Thread(target=renew)
        renewal.start()
        time.sleep(0.5)  # the renewal is waiting for the Operation's row now
        assert renewal.is_alive()
        # It does not hold the task: the outcome's transaction can go on and take it.
        Job.objects.select_for_update(nowait=True).get(pk="x:task")
    renewal.join(timeout=30)
    assert lost == [set()]

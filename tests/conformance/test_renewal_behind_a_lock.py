"""A lease renewal must not leave a worker's other jobs unrenewed while one job's row is
locked, nor leave the locked job's lease to lapse.

A handler inside ``ctx.once`` holds its own job's row locked for as long as its function
runs. A renewal that waited for that row would not extend the worker's other leases
meanwhile: they would lapse although the worker was alive and renewing on time, and the
reclaim duty would hand them to another worker, so the same job ran twice at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from headgate_django import Envelope, enqueue, store, task
from headgate_django.models import Job
from headgate_django.store.effects import job_effect_once
from headgate_django.worker.runner import Worker

SHORT = timedelta(seconds=2)
pytestmark = pytest.mark.django_db(transaction=True)


def _skip_sqlite() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")


@task(kind="test.renewal.long_once")
def long_once(ctx, seconds: float) -> int:
    return ctx.once("slow", lambda: time.sleep(seconds) or 1)


@task(kind="test.renewal.sleeper")
def sleeper(ctx, seconds: float) -> None:
    time.sleep(seconds)


def test_the_renewal_of_free_rows_skips_a_held_row_and_waits_for_nothing():
    _skip_sqlite()
    q = "renew-free"
    enqueue([Envelope(kind="test.noop", id=i, queue=q) for i in ("a-held", "b-free")])
    held, free = store.job_claim(worker_id="w1", limit=2, lease_ttl=SHORT, queues=[q])
    before = dict(Job.objects.values_list("id", "lease_expires_at"))
    with transaction.atomic():
        Job.objects.select_for_update().get(pk="a-held")  # a ctx.once, say
        results: list[store.Renewal] = []

        def renew() -> None:
            try:
                results.append(store.job_renew_free_leases([held.ref, free.ref], lease_ttl=SHORT))
            finally:
                connections.close_all()

        renewal = threading.Thread(target=renew)
        renewal.start()
        renewal.join(timeout=10)
        assert not renewal.is_alive(), "the renewal waited for the held row"
    assert results == [store.Renewal(set(), [held.ref])]
    after = dict(Job.objects.values_list("id", "lease_expires_at"))
    assert after["b-free"] > before["b-free"]
    assert after["a-held"] == before["a-held"]


def test_the_renewal_of_a_held_row_lands_when_its_holder_commits():
    _skip_sqlite()
    enqueue(Envelope(kind="test.noop", id="held", queue="renew-held"))
    (held,) = store.job_claim(worker_id="w1", limit=1, lease_ttl=SHORT, queues=["renew-held"])
    before = Job.objects.get(pk="held").lease_expires_at
    lost: list[set[str]] = []

    def renew() -> None:
        try:
            lost.append(store.job_renew_leases([held.ref], lease_ttl=timedelta(minutes=5)))
        finally:
            connections.close_all()

    with transaction.atomic():
        Job.objects.select_for_update().get(pk="held")
        renewal = threading.Thread(target=renew)
        renewal.start()
        time.sleep(0.3)
        assert renewal.is_alive()  # waiting for the row
    renewal.join(timeout=10)
    assert lost == [set()]
    assert Job.objects.get(pk="held").lease_expires_at >= before + timedelta(minutes=4)


def test_a_worker_keeps_every_lease_while_a_once_runs_past_the_lease():
    """A worker whose lease is 2 s runs a ``ctx.once`` of 3.5 s beside another handler of
    3.5 s, while the reclaim duty runs every 0.2 s: neither job is taken from it. A renewal
    that waited for the once's row (its id sorts first) left the other lease to lapse."""
    _skip_sqlite()
    q = "renew-worker"
    enqueue(
        [
            replace(long_once.envelope(seconds=3.5), id="a-once", queue=q),
            replace(sleeper.envelope(seconds=3.5), id="b-sleeper", queue=q),
        ]
    )
    stop = threading.Event()
    retried: list[str] = []
    errors: list[BaseException] = []

    def reclaim_duty() -> None:
        try:
            while not stop.wait(0.2):
                retried.extend(store.job_reclaim_expired().retried)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    duty = threading.Thread(target=reclaim_duty)
    duty.start()
    try:
        Worker(queues=[q], concurrency=2, burst=True, run_duties=False, lease_ttl=SHORT).run()
    finally:
        stop.set()
        duty.join()
    assert errors == []
    assert retried == []
    jobs = dict(Job.objects.values_list("id", "state"))
    assert jobs == {"a-once": "completed", "b-sleeper": "completed"}
    assert set(Job.objects.values_list("attempt", "crash_attempt")) == {(0, 0)}


def test_a_once_longer_than_a_third_of_the_lease_renews_it_at_its_commit():
    """The row was held, so no renewal touched it meanwhile; its commit renews the lease,
    so the reclaim duty does not take the job in the moment before the worker's renewal
    of the row (waiting for that commit) lands."""
    _skip_sqlite()
    enqueue(Envelope(kind="test.noop", id="long-once", queue="long-once"))
    (claimed,) = store.job_claim(worker_id="w1", limit=1, lease_ttl=SHORT, queues=["long-once"])
    granted = Job.objects.get(pk="long-once").lease_expires_at

    def slow() -> int:
        time.sleep(2.5)  # longer than the lease
        return 1

    assert job_effect_once(claimed.ref, "slow", slow, lease_ttl=SHORT) == 1
    assert store.job_reclaim_expired().retried == []
    job = Job.objects.get(pk="long-once")
    assert job.state == "running"
    # Measured on the store clock: the commit came at least 2.5 s after the grant.
    assert job.lease_expires_at >= granted + timedelta(seconds=2.5)

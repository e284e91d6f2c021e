"""Concurrent claims in one process: eight threads, each with its own connection, drain
2,000 jobs and no job is handed out twice. On SQLite this goes through ``BEGIN IMMEDIATE``;
on PostgreSQL and MariaDB through ``FOR UPDATE SKIP LOCKED``. (Two processes racing are
covered by the integration suite.)"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from headgate_django import DuplicateError, Envelope, enqueue, store
from headgate_django.models import Job
from tests.conformance.helpers import LONG

THREADS = 8
JOBS = 2000


def _claim_until_empty(worker: str, start: threading.Barrier, out: list[str]) -> None:
    try:
        start.wait()
        while batch := store.job_claim(worker_id=worker, limit=20, lease_ttl=LONG):
            out.extend(c.ref.job_id for c in batch)
    finally:
        connection.close()  # this thread's own connection


@pytest.mark.django_db(transaction=True)
def test_every_job_is_claimed_exactly_once():
    ids = enqueue([Envelope(kind="test.noop")] * 1000) + enqueue(
        [Envelope(kind="test.noop")] * 1000
    )
    assert len(set(ids)) == JOBS
    start = threading.Barrier(THREADS)
    claimed: dict[str, list[str]] = {f"t{n}": [] for n in range(THREADS)}
    errors: list[BaseException] = []

    def run(worker: str) -> None:
        try:
            _claim_until_empty(worker, start, claimed[worker])
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(worker,)) for worker in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    everything = [job_id for part in claimed.values() for job_id in part]
    assert len(everything) == JOBS
    assert set(everything) == set(ids)
    rows = Job.objects.values_list("id", "state", "fence", "claimed_by")
    owner = {job_id: worker for worker, part in claimed.items() for job_id in part}
    assert {(state, fence) for _, state, fence, _ in rows} == {("running", 1)}
    assert all(owner[job_id] == by for job_id, _, _, by in rows)


@contextlib.contextmanager
def _lock_wait_limit(*, seconds: int) -> Iterator[None]:
    """This connection's row-lock waits fail after ``seconds`` (instead of 50 s on
    MySQL/MariaDB and never on PostgreSQL), then the server's default again."""
    mysql = connection.vendor == "mysql"
    with connection.cursor() as cursor:
        if mysql:
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {seconds}")
        else:
            cursor.execute(f"SET lock_timeout = '{seconds}s'")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if mysql:
                cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
            else:
                cursor.execute("RESET lock_timeout")


@pytest.mark.django_db(transaction=True)
def test_a_claim_in_flight_does_not_hide_the_other_available_jobs():
    """SKIP LOCKED must skip only the rows another claim is taking, not every candidate
    (on MySQL/MariaDB this needs the claim-ordered index of migration 0002)."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises writers: a second claim waits for the first")
    ids = enqueue([Envelope(kind="test.noop")] * 3)
    if connection.vendor == "mysql":
        # Statistics of a table holding only these three jobs, as a quiet queue's table
        # has them: with them InnoDB read the second claim's UPDATE through a state-led
        # index rather than the ids it names, and locked the holder's row on the way.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE TABLE headgate_job")
            cursor.fetchall()
    holding, done = threading.Event(), threading.Event()
    held: list[str] = []

    def hold_a_claim() -> None:
        try:
            with transaction.atomic():
                held.extend(
                    c.ref.job_id
                    for c in store.job_claim(worker_id="holder", limit=1, lease_ttl=LONG)
                )
                holding.set()
                done.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_a_claim)
    holder.start()
    try:
        assert holding.wait(timeout=30)
        # Waiting on the holder's rows is the failure: make it fail fast instead of
        # succeeding once the holder gives up (its wait would otherwise end in 30 s).
        with _lock_wait_limit(seconds=5):
            others = store.job_claim(worker_id="other", limit=5, lease_ttl=LONG)
    finally:
        done.set()
        holder.join()
    assert len(held) == 1
    assert sorted([*held, *(c.ref.job_id for c in others)]) == sorted(ids)


def _enqueue_in_open_transaction(env: Envelope, holding: threading.Event) -> threading.Thread:
    """Another connection enqueues ``env`` and commits a moment after ``holding`` is set,
    so an enqueue racing it meets the row in the unique index, not in its pre-check."""

    def run() -> None:
        try:
            with transaction.atomic():
                enqueue(env)
                holding.set()
                time.sleep(0.1)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert holding.wait(timeout=30)
    return thread


@pytest.mark.django_db(transaction=True)
def test_racing_enqueues_of_the_same_caller_id_are_idempotent():
    env = Envelope(kind="test.noop", id="order-1", payload=b'{"args":[],"kwargs":{"n":1}}')
    winner = _enqueue_in_open_transaction(env, threading.Event())
    try:
        assert enqueue(env) == ["order-1"]
    finally:
        winner.join()
    assert list(Job.objects.values_list("id", flat=True)) == ["order-1"]


@pytest.mark.django_db(transaction=True)
def test_racing_enqueues_of_one_unique_key_name_the_winner():
    winner_env = Envelope(kind="test.noop", id="first", unique_key="nightly")
    winner = _enqueue_in_open_transaction(winner_env, threading.Event())
    try:
        with pytest.raises(DuplicateError) as info:
            enqueue(Envelope(kind="test.noop", id="second", unique_key="nightly"))
    finally:
        winner.join()
    assert info.value.existing_id == "first"
    assert list(Job.objects.values_list("id", flat=True)) == ["first"]

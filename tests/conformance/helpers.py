"""Put jobs into any state through the store's own verbs, and read rows back.

No raw rows: a job reaches ``archived`` by being claimed and skipped, ``quarantined`` by
crashing, and so on, so the suite exercises the same writes production makes. Each job
gets its own queue by default, so a test can claim exactly the job it means to.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.test import override_settings

from headgate_django import store
from headgate_django.envelope import Envelope, encode_call
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.fenced import Completion
from headgate_django.store.maintenance import ReclaimReport

WORKER = "conformance"
LONG = timedelta(minutes=5)
#: A lease that is over almost as soon as it is granted (see :func:`crash`).
BLINK = timedelta(milliseconds=1)
_queues = itertools.count()


def fresh_queue() -> str:
    return f"cq-{next(_queues)}"


def unique_payload(**kwargs: Any) -> bytes:
    """A payload no other job has, so its fingerprint is its own."""
    return encode_call((), {"nonce": uuid.uuid4().hex, **kwargs})


def envelope(**kwargs: Any) -> Envelope:
    kwargs.setdefault("kind", "test.noop")
    kwargs.setdefault("queue", fresh_queue())
    return Envelope(**kwargs)


def enqueue_job(**kwargs: Any) -> str:
    return store.job_insert_many([envelope(**kwargs)])[0]


def row(job_id: str) -> dict[str, Any]:
    """Every column of the job, for before/after comparisons."""
    values = Job.objects.values().get(pk=job_id)
    values["payload"] = bytes(values["payload"])
    if values["cp_cursor"] is not None:
        values["cp_cursor"] = bytes(values["cp_cursor"])
    return values


def state_of(job_id: str) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


def claim(job_id: str, *, lease_ttl: timedelta = LONG) -> ClaimedJob:
    """Claim exactly ``job_id`` (it must be available, alone in its queue)."""
    queue = Job.objects.values_list("queue", flat=True).get(pk=job_id)
    claimed = store.job_claim(worker_id=WORKER, limit=2, lease_ttl=lease_ttl, queues=[queue])
    assert [c.ref.job_id for c in claimed] == [job_id]
    return claimed[0]


def expire_lease() -> None:
    """Outlive a :data:`BLINK` lease (the store clock decides; this only waits for it)."""
    time.sleep(0.02)


def crash(job_id: str) -> tuple[ClaimedJob, ReclaimReport]:
    """One attempt whose worker dies: claim on a blink lease, let it lapse, reclaim it."""
    claimed = claim(job_id, lease_ttl=BLINK)
    expire_lease()
    return claimed, store.job_reclaim_expired()


def job_in_state(state: State, **kwargs: Any) -> tuple[str, ClaimedJob | None]:
    """A job in ``state``, reached through the store; the claim if it was ever running."""
    if state is State.PENDING:
        return enqueue_job(pending=True, **kwargs), None
    if state is State.SCHEDULED:
        return enqueue_job(delay=timedelta(hours=1), **kwargs), None
    if state is State.QUARANTINED:
        kwargs.setdefault("payload", unique_payload())
        with override_settings(HEADGATE={"CRASH_LIMIT": 1}):
            claimed, _ = crash(enqueue_job(**kwargs))
        return claimed.ref.job_id, claimed
    job_id = enqueue_job(**kwargs)
    if state is State.AVAILABLE:
        return job_id, None
    if state is State.CANCELLED:
        assert store.job_cancel(job_id) is True
        return job_id, None
    claimed = claim(job_id)
    if state is State.RETRYABLE:
        store.job_retry(claimed.ref, error="boom", delay=timedelta(hours=1))
    elif state is State.COMPLETED:
        assert store.job_complete_many([Completion(claimed.ref, {"ok": True})]) == {job_id}
    elif state is State.ARCHIVED:
        store.job_skip(claimed.ref, reason="not needed")
    elif state is State.UNDECODABLE:
        store.job_mark_undecodable(claimed.ref, reason="bad bytes")
    else:
        assert state is State.RUNNING, state
    assert state_of(job_id) == state.value
    return job_id, claimed


#: How far apart two store-clock readings taken in one test may be. Generous on purpose:
#: it separates "from the store clock" from "hours off", it does not time anything.
SLACK = timedelta(seconds=5)


def near(instant: Any, expected: Any, slack: timedelta = SLACK) -> bool:
    return instant is not None and abs(instant - expected) <= slack


def wait_for_lock_wait(timeout: float = 30.0) -> None:
    """Return once another session of this test database waits for a row lock.

    Races are ordered with it: one connection holds a row locked, the path under test
    runs in a second one until it blocks on that row, and only then is the first let go.
    It may be called inside the transaction that holds the lock.
    """
    from django.db import connection

    pauses = (0.02, 0.02)  # seconds between two reads, from and to
    if connection.vendor == "postgresql":
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
    elif connection.vendor == "mysql":
        sql = (
            "SELECT count(*) FROM information_schema.innodb_trx t "
            "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
            "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
        )
        # InnoDB refreshes innodb_trx only when nobody read it in the last 0.1 s: sessions
        # of other test processes polling in step could starve it, so the pause varies.
        pauses = (0.15, 0.45)
    else:
        raise AssertionError("SQLite has no row locks")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                # Inside a transaction PostgreSQL answers pg_stat_activity from a snapshot
                # taken at its first read: drop it, or a wait begun since is never seen.
                cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(sql)
            if cursor.fetchone()[0]:
                return
        time.sleep(random.uniform(*pauses))
    raise AssertionError("no session started waiting for a row lock")


def race_behind_a_lock(holder: Callable[[], object], waiter: Callable[[], object]) -> list[Any]:
    """Run ``holder`` in a transaction of one thread and keep it open; run ``waiter`` in a
    second thread, and let the first commit only once the second waits for one of its
    locks. Returns the exceptions either raised (an ``assert`` inside one included).

    The interleaving is exact on PostgreSQL and MySQL/MariaDB, however loaded the machine:
    nothing is ordered by sleeping.
    """
    from django.db import connection, transaction

    holding, go = threading.Event(), threading.Event()
    errors: list[Any] = []

    def in_thread(body: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def hold() -> None:
        try:
            with transaction.atomic():
                holder()
                holding.set()
                assert go.wait(timeout=60), "the waiting side never blocked"
        finally:
            holding.set()  # a failed holder is reported, not waited for

    first, second = in_thread(hold), None
    try:
        assert holding.wait(timeout=60)
        if not errors:
            second = in_thread(waiter)
            wait_for_lock_wait()
    finally:
        go.set()
        first.join()
        if second is not None:
            second.join()
    return errors

"""``job_claim``: which jobs a claim takes, in what order, and the lease it stamps them with."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from headgate_django import Envelope, enqueue, store
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import LONG, WORKER, enqueue_job, row, state_of

pytestmark = pytest.mark.django_db


def claim_ids(**kwargs) -> list[str]:
    kwargs.setdefault("worker_id", WORKER)
    kwargs.setdefault("lease_ttl", LONG)
    kwargs.setdefault("limit", 10)
    return [c.ref.job_id for c in store.job_claim(**kwargs)]


def reads_during(
    action: Callable[[], object], relations: list[str | list[str]], *, setting: str
) -> list[int]:
    """Rows or index entries ``action`` read from each of ``relations`` (a list of names is
    summed), from this session's pending statistics, with a planner ``setting`` applied."""
    read = "SELECT " + ", ".join(
        " + ".join(
            f"pg_stat_get_xact_tuples_returned('{name}'::regclass)"
            for name in ([names] if isinstance(names, str) else names)
        )
        for names in relations
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL {setting}")
        cursor.execute(read)
        before = cursor.fetchone()
        action()
        cursor.execute(read)
        after = cursor.fetchone()
    return [a - b for a, b in zip(after, before, strict=True)]


def test_higher_priority_first_then_oldest_schedule():
    low = enqueue(Envelope(kind="test.noop", queue="q", priority=-5))[0]
    past = store.db_now().replace(year=2020)  # an instant already past: available at once
    [old] = enqueue(Envelope(kind="test.noop", queue="q", scheduled_at=past))
    assert (state_of(old), row(old)["scheduled_at"]) == ("available", past)
    new = enqueue(Envelope(kind="test.noop", queue="q"))[0]
    high = enqueue(Envelope(kind="test.noop", queue="q", priority=10))[0]
    assert claim_ids(limit=1) == [high]
    assert claim_ids(limit=1) == [old]
    assert claim_ids(limit=1) == [new]
    assert claim_ids(limit=1) == [low]
    assert claim_ids(limit=1) == []


def test_one_claim_returns_its_jobs_in_claim_order():
    # A worker starts buffered jobs in the order the claim returns them.
    past = store.db_now().replace(year=2020)
    ids = enqueue(
        [
            Envelope(kind="test.noop", queue="q", priority=-5),
            Envelope(kind="test.noop", queue="q"),
            Envelope(kind="test.noop", queue="q", scheduled_at=past),
            Envelope(kind="test.noop", queue="q", priority=10),
        ]
    )
    low, new, old, high = ids
    assert claim_ids() == [high, old, new, low]


def test_limit_and_queues():
    mail = [enqueue_job(queue="mail") for _ in range(3)]
    other = enqueue_job(queue="other")
    assert claim_ids(limit=0) == []
    first = claim_ids(limit=2, queues=["mail"])
    assert len(first) == 2 and set(first) <= set(mail)
    assert claim_ids(queues=["mail", "nowhere"]) == sorted(set(mail) - set(first))
    assert state_of(other) == "available"
    assert claim_ids(queues=None) == [other]


def test_a_name_no_job_can_have_matches_nothing():
    """Queue and kind names cannot contain a space; asking for one claims nothing, not the
    jobs of the names it would split into."""
    mail = enqueue_job(queue="mail")
    assert claim_ids(queues=["mail other"]) == []
    assert claim_ids(kinds=["test.noop test.echo"]) == []
    assert claim_ids(queues=["mail other", "mail"], kinds=["x y", "test.noop"]) == [mail]


def test_one_lease_per_claim_and_one_fence_per_job():
    ids = enqueue([Envelope(kind="test.noop", queue="q")] * 3)
    store.job_retry(
        store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG, queues=["q"])[0].ref,
        error="x",
        delay=timedelta(0),
    )
    store.job_promote_due()
    claimed = store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG, queues=["q"])
    assert sorted(c.ref.job_id for c in claimed) == sorted(ids)
    assert len({c.ref.lease_id for c in claimed}) == 1
    assert sorted(c.ref.fence for c in claimed) == [1, 1, 2]
    for c in claimed:
        assert (row(c.ref.job_id)["lease_id"], row(c.ref.job_id)["fence"]) == (
            c.ref.lease_id,
            c.ref.fence,
        )


def test_claim_hands_over_what_the_attempt_needs():
    job_id = enqueue_job(
        kind="test.echo",
        payload=b'{"args":[],"kwargs":{"value":1}}',
        schema_version=1,
        max_attempts=4,
        timeout=timedelta(seconds=9),
        retention=timedelta(hours=2),
        workflow_id="wf-1",
    )
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    assert claimed.ref.job_id == job_id
    assert (claimed.kind, claimed.payload, claimed.schema_version) == (
        "test.echo",
        b'{"args":[],"kwargs":{"value":1}}',
        1,
    )
    assert (claimed.attempt, claimed.crash_attempt, claimed.max_attempts) == (0, 0, 4)
    assert (claimed.timeout, claimed.retention) == (timedelta(seconds=9), timedelta(hours=2))
    assert (claimed.checkpoint, claimed.cursor, claimed.workflow_id) == ({}, None, "wf-1")


def test_a_long_worker_id_still_gets_a_working_lease():
    """Worker ids default to ``host:pid:rand``; a long host name must not break claims."""
    job_id = enqueue_job()
    worker = "pod-" + "x" * 120 + ".svc.cluster.local:4242:abcdef"
    [claimed] = store.job_claim(worker_id=worker, limit=1, lease_ttl=LONG)
    assert row(job_id)["lease_id"] == claimed.ref.lease_id
    assert row(job_id)["claimed_by"] == worker
    assert store.job_complete_many([Completion(claimed.ref, None)]) == {job_id}


@pytest.mark.django_db(transaction=True)  # no rolled-back rows of other tests in the index
@pytest.mark.parametrize("queues", [None, ["q"], ["q", "other"]])
def test_a_claim_reads_only_what_it_takes_whatever_the_planner_believes(queues):
    """A claim must read the first entries of a claim index and update those rows by
    primary key, never read every available row. The planner picks those plans only while
    it believes them cheaper: stale statistics (taken while nothing was available) make it
    believe otherwise, and a plan prepared while the table was empty keeps a sequential
    scan. Here the first claim meets an empty table, and then the session turns index scans
    off, which steers the planner the same way, every time."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner; MySQL and SQLite claims name their index")
    with connection.cursor() as cursor:  # rows other tests rolled back keep index entries
        cursor.execute("VACUUM headgate_job")
    assert claim_ids(limit=10, queues=queues) == []
    for _ in range(4):
        enqueue([Envelope(kind="test.noop", queue="q") for _ in range(500)])
    claimed: list[str] = []
    claim_indexes = ["headgate_job_claim", "headgate_job_claim_all"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'headgate_job'::regclass"
        )
        others = [name for (name,) in cursor.fetchall() if name not in claim_indexes]
    read = reads_during(
        lambda: claimed.extend(claim_ids(limit=10, queues=queues)),
        ["headgate_job", claim_indexes, others],
        setting="enable_indexscan = off",
    )
    assert len(claimed) == 10
    # No table rows scanned, 10 claim-index entries, and no entry of any other index: the
    # update takes the locked rows by address (a (kind, id) index also holds every id, and
    # once served the update by a scan of all its entries).
    assert read == [0, 10, 0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verb", ["complete", "release", "renew"])
def test_fenced_batch_writes_find_their_rows_by_primary_key_whatever_the_planner_believes(verb):
    """A batch of fenced writes must look its rows up by primary key. Statistics taken while
    nothing ran make the running jobs look like one row, and a condition on ``state`` would
    let the planner read all of them through the lease index and compare each with every
    lease in the batch."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner")
    enqueue([Envelope(kind="test.noop", queue="q") for _ in range(300)])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE headgate_job")  # statistics: nothing runs
    claimed = store.job_claim(worker_id=WORKER, lease_ttl=LONG, limit=200, queues=["q"])
    refs = [c.ref for c in claimed[:10]]
    write = {
        "complete": lambda: store.job_complete_many([Completion(r, None) for r in refs]),
        "release": lambda: store.job_release_many(refs),
        "renew": lambda: store.job_renew_leases(refs, lease_ttl=LONG),
    }[verb]
    # A table this small is cheapest to read whole; the point is which index.
    seq, lease, pkey = reads_during(
        write,
        ["headgate_job", "headgate_job_lease", "headgate_job_pkey"],
        setting="enable_seqscan = off",
    )
    assert (seq, lease) == (0, 0) and pkey >= len(refs)


@pytest.mark.parametrize("queues", [None, ["q"], ["q", "other"]])
def test_sqlite_reads_claim_candidates_through_a_claim_index(queues):
    """Without statistics SQLite's planner may read every available row through another
    index and sort them all for each claim; the claim names the index that holds them in
    claim order."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's planner")
    enqueue([Envelope(kind="test.noop", queue="q") for _ in range(20)])
    with CaptureQueriesContext(connection) as captured:
        assert len(claim_ids(limit=5, queues=queues)) == 5
    candidates = next(q["sql"] for q in captured if q["sql"].startswith("SELECT id FROM"))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + candidates)
        plan = " ".join(str(step[-1]) for step in cursor.fetchall())
    index = "headgate_job_claim " if queues else "headgate_job_claim_all"
    assert f"USING INDEX {index}" in f"{plan} "
    if queues != ["q", "other"]:  # two queues' candidates are merged by a sort
        assert "TEMP B-TREE" not in plan


def test_sqlite_claims_without_the_claim_index():
    """``INDEXED BY`` fails a statement whose index is missing (a database not yet
    migrated), so the claim names the index only where it exists."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's index hint")
    from headgate_django.store import vendor

    wrapper = connections["default"]  # not the ``connection`` proxy: the cache is on this
    low = enqueue(Envelope(kind="test.noop", priority=-1))[0]
    high = enqueue(Envelope(kind="test.noop", priority=5))[0]
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute("DROP INDEX headgate_job_claim_all")
    wrapper.__dict__.pop(vendor.SESSION_FACTS, None)
    try:
        assert claim_ids(limit=10) == [high, low]
    finally:
        wrapper.__dict__.pop(vendor.SESSION_FACTS, None)


def test_a_database_built_without_migrations_still_claims(caplog):
    """``--nomigrations`` test runs build tables from the models, without migration 0010's
    function: claims then take the portable statements, in the same order, and say so."""
    if connection.vendor != "postgresql":
        pytest.skip("the claim function is PostgreSQL's")
    from headgate_django.store import vendor

    wrapper = connections["default"]  # not the ``connection`` proxy: the cache is on this
    low = enqueue(Envelope(kind="test.noop", queue="q", priority=-1))[0]
    high = enqueue(Envelope(kind="test.noop", queue="q", priority=5))[0]
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute("DROP FUNCTION headgate_claim")
    wrapper.__dict__.pop(vendor.SESSION_FACTS, None)
    try:
        assert claim_ids(limit=10, queues=["q"]) == [high, low]
        assert "headgate_claim() is missing" in caplog.text
    finally:
        wrapper.__dict__.pop(vendor.SESSION_FACTS, None)


def test_job_available_sees_only_claimable_work_in_the_queues_asked():
    assert store.job_available() is False
    enqueue(Envelope(kind="test.noop", queue="reports", delay=timedelta(hours=1)))
    assert store.job_available() is False  # scheduled, not yet due
    enqueue(Envelope(kind="test.noop", queue="reports"))
    assert store.job_available() is True
    assert store.job_available(["reports", "mail"]) is True
    assert store.job_available(["mail"]) is False

"""The maintenance verbs behind the singleton duties: reclaim and quarantine, promote,
evict, and the duty leases that keep each of them to one runner at a time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError

from headgate_django import enqueue, store
from headgate_django.envelope import fingerprint
from headgate_django.exceptions import NotFoundError, QuarantinedError
from headgate_django.kernel.states import State
from headgate_django.models import DutyLease, Job, Quarantine
from headgate_django.store.fenced import Completion
from headgate_django.worker.duties import Duty, DutyRunner, default_duties
from tests.conformance.helpers import (
    BLINK,
    claim,
    crash,
    enqueue_job,
    envelope,
    expire_lease,
    job_in_state,
    row,
    state_of,
    unique_payload,
)

pytestmark = pytest.mark.django_db


# -- reclaim and quarantine ------------------------------------------------------------


def test_third_crash_quarantines_the_fingerprint_and_its_waiting_jobs():
    payload = unique_payload()
    fp = fingerprint("test.noop", payload)
    crasher = enqueue_job(payload=payload)
    waiting = {state: job_in_state(state, payload=payload)[0] for state in _WAITING}
    running, running_claim = job_in_state(State.RUNNING, payload=payload)
    finished, _ = job_in_state(State.COMPLETED, payload=payload)
    other = enqueue_job(payload=unique_payload())  # same kind, other payload

    for _ in range(2):
        assert crash(crasher)[1].retried == [crasher]
        store.job_promote(crasher)
    _, report = crash(crasher)

    assert report.quarantined == [fp]
    assert state_of(crasher) == "quarantined"
    assert {state: state_of(job_id) for state, job_id in waiting.items()} == dict.fromkeys(
        _WAITING, "quarantined"
    )
    assert (state_of(running), state_of(finished), state_of(other)) == (
        "running",
        "completed",
        "available",
    )
    assert Quarantine.objects.get().crash_count == 3

    before = Job.objects.count()
    with pytest.raises(QuarantinedError) as info:
        enqueue([envelope(), envelope(payload=payload)])
    assert info.value.fingerprint == fp
    assert Job.objects.count() == before

    assert store.quarantine_release(fp) == 1 + len(waiting)
    released = [crasher, *waiting.values()]
    assert {state_of(job_id) for job_id in released} == {"available"}
    assert {row(job_id)["crash_attempt"] for job_id in released} == {0}
    assert state_of(running) == "running"
    assert store.job_complete_many([Completion(running_claim.ref, None)]) == {running}
    enqueue(envelope(payload=payload))  # accepted again


_WAITING = (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE)


def test_releasing_an_unknown_fingerprint_is_not_found():
    with pytest.raises(NotFoundError):
        store.quarantine_release("0" * 32)


def test_a_crash_is_attributed_to_the_step_in_progress():
    job_id = enqueue_job()
    claimed = claim(job_id, lease_ttl=BLINK)
    store.job_save_checkpoint(claimed.ref, {"in_progress_step": "charge-card"})
    expire_lease()
    assert store.job_reclaim_expired().retried == [job_id]
    assert row(job_id)["errors"][-1]["error"].endswith("during step 'charge-card'")


def test_reclaim_leaves_live_leases_alone():
    job_id, _ = job_in_state(State.RUNNING)
    before = row(job_id)
    report = store.job_reclaim_expired()
    assert (report.retried, report.quarantined) == ([], [])
    assert row(job_id) == before


def test_reclaim_is_bounded():
    jobs = [enqueue_job() for _ in range(3)]
    for job_id in jobs:
        claim(job_id, lease_ttl=BLINK)
    expire_lease()
    first = store.job_reclaim_expired(limit=2).retried
    second = store.job_reclaim_expired(limit=2).retried
    assert len(first) == 2 and len(second) == 1
    assert sorted(first + second) == sorted(jobs)


# -- promote ---------------------------------------------------------------------------


def test_promote_due_is_bounded_and_leaves_pending_alone():
    due = [enqueue_job(delay=timedelta(milliseconds=1)) for _ in range(3)]
    pending = enqueue_job(pending=True)
    expire_lease()
    assert store.job_promote_due(limit=2) == 2
    assert store.job_promote_due(limit=2) == 1
    assert store.job_promote_due() == 0
    assert {state_of(job_id) for job_id in due} == {"available"}
    assert state_of(pending) == "pending"


# -- evict -----------------------------------------------------------------------------

BLINK_RETENTION = timedelta(milliseconds=1)


def test_evict_deletes_lapsed_terminal_rows_only():
    lapsed = {
        state: job_in_state(state, retention=BLINK_RETENTION)[0]
        for state in (State.COMPLETED, State.ARCHIVED, State.CANCELLED, State.UNDECODABLE)
    }
    kept = job_in_state(State.COMPLETED, retention=timedelta(days=1))[0]
    quarantined = job_in_state(State.QUARANTINED, retention=BLINK_RETENTION)[0]
    live = [job_in_state(state, retention=BLINK_RETENTION)[0] for state in _WAITING]
    # Even a quarantined row whose expiry has passed stays for the operator.
    Job.objects.filter(pk=quarantined).update(expires_at=store.db_now() - timedelta(days=1))
    expire_lease()

    assert store.job_evict_retained() == {
        "completed": 1,
        "archived": 1,
        "cancelled": 1,
        "undecodable": 1,
    }
    assert not Job.objects.filter(pk__in=lapsed.values()).exists()
    assert state_of(kept) == "completed"
    assert state_of(quarantined) == "quarantined"
    assert [state_of(job_id) for job_id in live] == [s.value for s in _WAITING]
    assert store.job_evict_retained() == {}


def test_evict_is_bounded():
    for _ in range(3):
        job_in_state(State.COMPLETED, retention=BLINK_RETENTION)
    expire_lease()
    assert store.job_evict_retained(limit=2) == {"completed": 2}
    assert store.job_evict_retained(limit=2) == {"completed": 1}
    assert Job.objects.count() == 0


# -- duties ----------------------------------------------------------------------------


def test_a_duty_has_one_holder_until_its_lease_lapses():
    assert store.duty_acquire("reclaim", holder="a", ttl=timedelta(minutes=1)) is True
    assert store.duty_acquire("reclaim", holder="b", ttl=timedelta(minutes=1)) is False
    assert store.duty_acquire("reclaim", holder="a", ttl=BLINK) is True  # renewal
    assert DutyLease.objects.get(pk="reclaim").holder == "a"
    expire_lease()
    assert store.duty_acquire("reclaim", holder="b", ttl=timedelta(minutes=1)) is True
    assert store.duty_acquire("reclaim", holder="a", ttl=timedelta(minutes=1)) is False
    duty = DutyLease.objects.get(pk="reclaim")
    assert (duty.holder, duty.fence) == ("b", 3)


def test_duties_are_independent_and_release_frees_them():
    assert store.duty_acquire("promote", holder="a", ttl=timedelta(minutes=1))
    assert store.duty_acquire("evict", holder="b", ttl=timedelta(minutes=1))
    store.duty_release("promote", holder="b")  # not the holder: no effect
    assert not store.duty_acquire("promote", holder="b", ttl=timedelta(minutes=1))
    store.duty_release("promote", holder="a")
    assert store.duty_acquire("promote", holder="b", ttl=timedelta(minutes=1))


def test_releasing_without_names_frees_every_duty_of_that_holder_only():
    """A stopping worker gives up all its duty leases in one statement."""
    for name in ("promote", "reclaim"):
        assert store.duty_acquire(name, holder="a", ttl=timedelta(minutes=1))
    assert store.duty_acquire("evict", holder="b", ttl=timedelta(minutes=1))
    store.duty_release(holder="a")
    held = dict(DutyLease.objects.values_list("name", "holder"))
    assert held == {"promote": "", "reclaim": "", "evict": "b"}
    assert not store.duty_acquire("evict", holder="c", ttl=timedelta(minutes=1))
    assert store.duty_acquire("promote", holder="c", ttl=timedelta(minutes=1))


def test_a_stopping_worker_begins_no_further_duty_and_the_next_tick_runs_it():
    ran: list[str] = []
    stopping = {"now": False}

    def first() -> dict:
        ran.append("first")
        stopping["now"] = True  # the worker is told to stop while this duty runs
        return {}

    def second() -> dict:
        ran.append("second")
        return {}

    runner = DutyRunner("duty-holder", [Duty("first", 60.0, first), Duty("second", 60.0, second)])
    runner.tick(lambda: stopping["now"])
    assert ran == ["first"]
    stopping["now"] = False
    runner.tick(lambda: stopping["now"])  # "first" is not due again; "second" still is
    assert ran == ["first", "second"]


def test_the_between_hook_runs_before_each_duty_that_is_due():
    """The worker renews its leases in ``between``: it must come before every duty that
    runs (a pass adds their durations up), and cost nothing for duties not due."""
    order: list[str] = []

    def duty(name: str) -> Duty:
        return Duty(name, 60.0, lambda: order.append(name) or {})

    runner = DutyRunner("duty-holder", [duty("a"), duty("b")])
    runner.tick(between=lambda: order.append("renew"))
    assert order == ["renew", "a", "renew", "b"]
    runner.tick(between=lambda: order.append("renew"))  # neither is due again yet
    assert order == ["renew", "a", "renew", "b"]


def test_a_promote_run_moves_a_burst_past_one_batch(monkeypatch):
    """Many jobs due at one instant (a minute's schedule ticks, written ahead) become
    available in one run, not one batch per duty interval."""
    from headgate_django.worker import duties

    # The run goes on while its batches come back full, within its time budget; a busy
    # test machine can take longer than the real budget for one batch of 1,000.
    monkeypatch.setattr(duties, "PROMOTE_BUDGET", 60.0)

    past = store.db_now() - timedelta(seconds=1)
    for size in (duties.PROMOTE_BATCH, 500):
        store.job_insert_many([envelope(queue="burst") for _ in range(size)])
    Job.objects.filter(queue="burst").update(state=State.SCHEDULED.value, scheduled_at=past)
    promote = next(d for d in default_duties() if d.name == "promote")
    assert promote.run() == {"promoted": duties.PROMOTE_BATCH + 500, "more": False}
    assert not Job.objects.filter(queue="burst").exclude(state=State.AVAILABLE.value).exists()


def test_a_duty_that_raises_does_not_keep_the_later_duties_from_running(caplog):
    """Duties run in a fixed order each pass: a bug in an early one (raising every time)
    must not leave reclaim, eviction and the scheduler never reached."""
    ran: list[str] = []

    def broken() -> dict:
        ran.append("broken")
        raise ValueError("a bug in a duty")

    def later() -> dict:
        ran.append("later")
        return {}

    runner = DutyRunner("duty-holder", [Duty("broken", 0.0, broken), Duty("later", 0.0, later)])
    runner.tick()
    runner.tick()
    assert ran == ["broken", "later", "broken", "later"]
    assert "duty broken failed" in caplog.text


def test_after_an_outage_reclaim_waits_a_renewal_interval_for_live_workers():
    """A lease that lapsed while the database was down belongs to a worker that will renew
    it once the database is back; the reclaim duty gives it one renewal interval to."""
    outage = {"on": True}

    def database_down() -> dict:
        if outage["on"]:
            raise OperationalError("server closed the connection unexpectedly")
        return {}

    reclaim = next(d for d in default_duties() if d.name == "reclaim")
    reclaim.interval = 0.0
    runner = DutyRunner("duty-holder", [Duty("probe", 0.0, database_down), reclaim])
    job_id = enqueue_job()
    held = claim(job_id, lease_ttl=BLINK)
    expire_lease()
    with pytest.raises(OperationalError):
        runner.tick()
    outage["on"] = False
    runner.tick()  # the database is back: the lapsed lease is left to its holder
    assert state_of(job_id) == "running"
    assert store.job_renew_leases([held.ref], lease_ttl=timedelta(minutes=1)) == set()
    assert row(job_id)["crash_attempt"] == 0

    reclaim.after_outage = 0.0  # the grace is over, and this time nobody renews
    assert store.job_renew_leases([held.ref], lease_ttl=BLINK) == set()
    expire_lease()
    runner.tick()
    assert state_of(job_id) == "retryable"  # a lease nobody renews is reclaimed as before
    assert row(job_id)["crash_attempt"] == 1


@pytest.mark.django_db(transaction=True)  # no rolled-back rows of other tests in the index
@pytest.mark.parametrize("duty", ["promote", "evict"])
def test_a_duty_reads_only_the_rows_that_are_due(duty):
    """A backlog that is not due yet (jobs scheduled an hour ahead, results retained for a
    day) must cost a duty's scan nothing: it compares the indexed instant with a clock the
    planner can bound the index with. Sequential scans are off, so the scan goes through
    the duty's index; read with a volatile clock it would read every entry."""
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner; the other clocks are constant through a statement")
    with connection.cursor() as cursor:  # rows other tests rolled back keep index entries
        cursor.execute("VACUUM headgate_job")
    if duty == "promote":
        enqueue([envelope(delay=timedelta(hours=1)) for _ in range(500)])
        index, run = "headgate_job_due", store.job_promote_due
    else:
        enqueue([envelope(retention=timedelta(days=1)) for _ in range(500)])
        done = store.job_claim(worker_id="w", limit=500, lease_ttl=timedelta(minutes=5))
        store.job_complete_many([Completion(c.ref) for c in done])
        index, run = "headgate_job_evict", store.job_evict_retained
    read = (
        "SELECT pg_stat_get_xact_tuples_returned('headgate_job'::regclass), "
        f"pg_stat_get_xact_tuples_returned('{index}'::regclass)"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(read)
        before = cursor.fetchone()
        assert not run()
        cursor.execute(read)
        after = cursor.fetchone()
    assert (after[0] - before[0], after[1] - before[1]) == (0, 0)


@pytest.mark.django_db(transaction=True)  # no rolled-back rows of other tests in the index
def test_the_last_minute_s_completions_do_not_read_jobs_kept_longer():
    """Jobs kept longer than the default retentions (a task's ``retention=30 days``) are
    not read by the dashboard's, the API's and every metrics scrape's count of the last
    minute's completions: read through the eviction index from the shortest retention up,
    they were, each of them, for as long as they were kept."""
    from django.db import connection, transaction

    from headgate_django.store.stats import _rates

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's statistics counters")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM headgate_job")
    enqueue([envelope(retention=timedelta(days=30)) for _ in range(300)])
    done = store.job_claim(worker_id="w", limit=300, lease_ttl=timedelta(minutes=5))
    store.job_complete_many([Completion(c.ref) for c in done])
    read = "SELECT pg_stat_get_xact_tuples_returned('headgate_job_evict'::regclass)"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(read)
        before = cursor.fetchone()[0]
        _rates(connection, store.db_now(), queues := {})  # the queues page's last minute
        cursor.execute(read)
        after = cursor.fetchone()[0]
    assert after - before == 0
    # Not counted either (a retention of their own), as documented.
    assert not any(q.completions_last_minute for q in queues.values())

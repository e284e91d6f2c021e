"""Every row of the state table, driven through the store verb that makes it.

Each case below registers the transition it exercises; ``test_every_transition_is_driven``
fails when the table grows a row (or a target) that no case drives, so the table and the
store cannot drift apart silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import override_settings

from headgate_django import admission, store
from headgate_django.enqueue import enqueue_one
from headgate_django.envelope import fingerprint
from headgate_django.kernel.states import TRANSITIONS, Event, State
from headgate_django.models import Job, Quarantine
from headgate_django.store.deadlines import job_archive_past_deadline
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import (
    LONG,
    WORKER,
    claim,
    crash,
    enqueue_job,
    envelope,
    expire_lease,
    job_in_state,
    near,
    row,
    state_of,
    unique_payload,
)

pytestmark = pytest.mark.django_db

Case = Callable[[], str]
CASES: dict[tuple[State, Event, State], Case] = {}


def transition(src: State, event: Event, target: State) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        CASES[(src, event, target)] = case
        return case

    return register


# -- into running --------------------------------------------------------------------


@transition(State.AVAILABLE, Event.ADMITTED, State.RUNNING)
def claim_available() -> str:
    job_id = enqueue_job()
    before = row(job_id)
    claimed = claim(job_id)
    after = row(job_id)
    now = store.db_now()
    assert after["fence"] == before["fence"] + 1 == claimed.ref.fence == 1
    assert after["lease_id"] == claimed.ref.lease_id and claimed.ref.lease_id.startswith(WORKER)
    assert near(after["lease_expires_at"], now + LONG)
    assert near(after["claimed_at"], now)
    assert after["claimed_by"] == WORKER
    assert (after["attempt"], after["crash_attempt"]) == (0, 0)
    return job_id


# -- out of running ------------------------------------------------------------------


@transition(State.RUNNING, Event.SUCCESS, State.COMPLETED)
def complete() -> str:
    job_id, claimed = job_in_state(State.RUNNING, retention=timedelta(days=2))
    assert store.job_complete_many([Completion(claimed.ref, {"n": 1})]) == {job_id}
    after = row(job_id)
    assert after["result"] == {"n": 1}
    assert near(after["finalized_at"], store.db_now())
    assert near(after["expires_at"], after["finalized_at"] + timedelta(days=2))
    assert (after["lease_id"], after["lease_expires_at"]) == (None, None)
    return job_id


@transition(State.RUNNING, Event.SUCCESS, State.DELETED)
def complete_without_retention() -> str:
    job_id, claimed = job_in_state(State.RUNNING, retention=timedelta(0))
    assert store.job_complete_many([Completion(claimed.ref, {"n": 1}, delete=True)]) == {job_id}
    assert not Job.objects.filter(pk=job_id).exists()
    return job_id


@transition(State.RUNNING, Event.RETRY, State.RETRYABLE)
def retry() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    target = store.job_retry(claimed.ref, error="ValueError: no", traceback="Traceback …")
    assert target is State.RETRYABLE
    after = row(job_id)
    assert (after["attempt"], after["crash_attempt"]) == (1, 0)
    assert [(e["attempt"], e["kind"], e["error"]) for e in after["errors"]] == [
        (1, "error", "ValueError: no")
    ]
    assert after["errors"][0]["traceback"] == "Traceback …"
    assert after["scheduled_at"] > store.db_now() - timedelta(seconds=1)
    assert (after["lease_id"], after["finalized_at"]) == (None, None)
    return job_id


@transition(State.RUNNING, Event.RETRY, State.ARCHIVED)
def retry_at_max_attempts() -> str:
    job_id, claimed = job_in_state(State.RUNNING, max_attempts=2)
    assert store.job_retry(claimed.ref, error="first", delay=timedelta(0)) is State.RETRYABLE
    store.job_promote(job_id)
    assert store.job_retry(claim(job_id).ref, error="second") is State.ARCHIVED
    after = row(job_id)
    assert after["attempt"] == 2
    assert [e["error"] for e in after["errors"]] == ["first", "second"]
    assert near(after["finalized_at"], store.db_now())
    assert after["expires_at"] is not None
    return job_id


@transition(State.RUNNING, Event.SKIP, State.ARCHIVED)
def skip() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    store.job_skip(claimed.ref, reason="nothing to do")
    after = row(job_id)
    assert after["attempt"] == 0  # a skip is not a failure
    assert [(e["kind"], e["error"]) for e in after["errors"]] == [("skip", "nothing to do")]
    assert after["finalized_at"] is not None and after["lease_id"] is None
    return job_id


@transition(State.RUNNING, Event.REVOKE, State.DELETED)
def revoke() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    assert store.job_revoke(claimed.ref, reason="the order is gone") is State.DELETED
    assert not Job.objects.filter(pk=job_id).exists()
    return job_id


@transition(State.RUNNING, Event.SNOOZE, State.SCHEDULED)
def snooze() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    store.job_snooze(claimed.ref, delay=timedelta(minutes=10))
    after = row(job_id)
    assert (after["attempt"], after["crash_attempt"], after["errors"]) == (0, 0, [])
    assert near(after["scheduled_at"], store.db_now() + timedelta(minutes=10))
    assert (after["lease_id"], after["lease_expires_at"]) == (None, None)
    return job_id


@transition(State.RUNNING, Event.UNDECODABLE, State.UNDECODABLE)
def mark_undecodable() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    store.job_mark_undecodable(claimed.ref, reason="no decoder for v9", traceback="tb")
    after = row(job_id)
    assert after["attempt"] == 0
    assert [(e["kind"], e["error"]) for e in after["errors"]] == [
        ("undecodable", "no decoder for v9")
    ]
    assert after["finalized_at"] is not None and after["lease_id"] is None
    return job_id


@transition(State.RUNNING, Event.RELEASE, State.AVAILABLE)
def release() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    before = row(job_id)
    assert store.job_release_many([claimed.ref]) == {job_id}
    after = row(job_id)
    same = ("attempt", "crash_attempt", "fence", "errors", "scheduled_at")
    assert {k: after[k] for k in same} == {k: before[k] for k in same}
    assert (after["lease_id"], after["lease_expires_at"]) == (None, None)
    return job_id


@transition(State.RUNNING, Event.LEASE_LOST, State.RETRYABLE)
def reclaim_expired() -> str:
    job_id = enqueue_job()
    _, report = crash(job_id)
    assert (report.retried, report.quarantined) == ([job_id], [])
    after = row(job_id)
    assert (after["attempt"], after["crash_attempt"]) == (0, 1)
    assert after["errors"][-1]["kind"] == "crash"
    assert WORKER in after["errors"][-1]["error"]
    assert near(after["scheduled_at"], store.db_now() + timedelta(seconds=1))  # CRASH_BACKOFF
    assert (after["lease_id"], after["lease_expires_at"]) == (None, None)
    return job_id


@transition(State.RUNNING, Event.LEASE_LOST, State.QUARANTINED)
def reclaim_at_crash_limit() -> str:
    payload = unique_payload()
    job_id = enqueue_job(payload=payload)
    for crashes in (1, 2):
        _, report = crash(job_id)
        assert report.retried == [job_id] and row(job_id)["crash_attempt"] == crashes
        store.job_promote(job_id)
    _, report = crash(job_id)
    fp = fingerprint("test.noop", payload)
    assert (report.retried, report.quarantined) == ([], [fp])
    assert row(job_id)["crash_attempt"] == 3
    quarantine = Quarantine.objects.get(pk=fp)
    assert (quarantine.kind, quarantine.crash_count, quarantine.sample_job_id) == (
        "test.noop",
        3,
        job_id,
    )
    assert bytes(quarantine.sample_payload) == payload
    return job_id


@transition(State.RUNNING, Event.OPERATOR_CANCEL, State.CANCELLED)
def cancel_running() -> str:
    job_id, _ = job_in_state(State.RUNNING)
    assert store.job_cancel(job_id) is True
    after = row(job_id)
    assert (after["lease_id"], after["lease_expires_at"]) == (None, None)
    assert after["finalized_at"] is not None
    return job_id


@transition(State.RUNNING, Event.SATURATED, State.CANCELLED)
def cancelled_for_a_newcomer() -> str:
    job_id, _ = job_in_state(State.RUNNING, partition_key="t")
    queue = Job.objects.get(pk=job_id).queue
    admission.set_concurrency_limit(queue, 1, on_saturated="cancel_running")
    newcomer = enqueue_job(queue=queue, partition_key="t")
    claimed = store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG, queues=[queue])
    assert [c.ref.job_id for c in claimed] == [newcomer]
    after = row(job_id)
    assert (after["lease_id"], after["lease_expires_at"]) == (None, None)
    assert after["finalized_at"] is not None
    return job_id


def _saturated(strategy: str) -> str:
    held, _ = job_in_state(State.RUNNING)
    queue = Job.objects.get(pk=held).queue
    admission.set_concurrency_limit(queue, 1, on_saturated=strategy)
    job_id = enqueue_job(queue=queue)
    assert store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG, queues=[queue]) == []
    after = row(job_id)
    assert (after["attempt"], after["crash_attempt"], after["fence"]) == (0, 0, 0)
    assert after["finalized_at"] is not None and after["expires_at"] is not None
    return job_id


transition(State.AVAILABLE, Event.SATURATED, State.ARCHIVED)(lambda: _saturated("discard"))
transition(State.AVAILABLE, Event.SATURATED, State.CANCELLED)(lambda: _saturated("cancel_incoming"))


# -- waiting states ------------------------------------------------------------------


@transition(State.PENDING, Event.OPERATOR_PROMOTE, State.AVAILABLE)
def promote_pending() -> str:
    job_id, _ = job_in_state(State.PENDING)
    store.job_promote(job_id)
    assert near(row(job_id)["scheduled_at"], store.db_now())
    return job_id


@transition(State.SCHEDULED, Event.OPERATOR_PROMOTE, State.AVAILABLE)
def promote_scheduled() -> str:
    job_id, _ = job_in_state(State.SCHEDULED)
    store.job_promote(job_id)
    assert near(row(job_id)["scheduled_at"], store.db_now())
    return job_id


@transition(State.RETRYABLE, Event.OPERATOR_PROMOTE, State.AVAILABLE)
def promote_retryable() -> str:
    job_id, _ = job_in_state(State.RETRYABLE)
    store.job_promote(job_id)
    assert row(job_id)["attempt"] == 1  # promoting does not forgive the failure
    return job_id


@transition(State.PENDING, Event.OPERATOR_SCHEDULE, State.SCHEDULED)
def reschedule_pending() -> str:
    job_id, _ = job_in_state(State.PENDING)
    store.job_reschedule(job_id, delay=timedelta(minutes=30))
    assert near(row(job_id)["scheduled_at"], store.db_now() + timedelta(minutes=30))
    return job_id


@transition(State.SCHEDULED, Event.OPERATOR_SCHEDULE, State.SCHEDULED)
def reschedule_scheduled() -> str:
    job_id, _ = job_in_state(State.SCHEDULED)
    at = store.db_now() + timedelta(days=3)
    store.job_reschedule(job_id, at=at)
    assert row(job_id)["scheduled_at"] == at
    return job_id


@transition(State.SCHEDULED, Event.SCHEDULE_DUE, State.AVAILABLE)
def promote_due_scheduled() -> str:
    job_id = enqueue_job(delay=timedelta(milliseconds=1))
    later = enqueue_job(delay=timedelta(hours=1))
    assert state_of(job_id) == "scheduled"
    expire_lease()
    assert store.job_promote_due() == 1
    assert state_of(later) == "scheduled"
    return job_id


@transition(State.RETRYABLE, Event.BACKOFF_DUE, State.AVAILABLE)
def promote_due_retryable() -> str:
    job_id, claimed = job_in_state(State.RUNNING)
    store.job_retry(claimed.ref, error="boom", delay=timedelta(0))
    later, _ = job_in_state(State.RETRYABLE)  # backing off for an hour
    assert store.job_promote_due() == 1
    assert state_of(later) == "retryable"
    assert row(job_id)["attempt"] == 1
    return job_id


def _cancel(state: State) -> Case:
    def case() -> str:
        job_id, _ = job_in_state(state)
        assert store.job_cancel(job_id) is True
        after = row(job_id)
        assert after["finalized_at"] is not None and after["expires_at"] is not None
        return job_id

    return case


for _state in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE):
    transition(_state, Event.OPERATOR_CANCEL, State.CANCELLED)(_cancel(_state))


def _quarantined_by_fingerprint(state: State) -> Case:
    """A waiting job shares its fingerprint with a job that crashes past the limit."""

    def case() -> str:
        payload = unique_payload()
        job_id, _ = job_in_state(state, payload=payload)
        crasher = enqueue_job(payload=payload)
        with override_settings(HEADGATE={"CRASH_LIMIT": 1}):
            _, report = crash(crasher)
        assert report.quarantined == [fingerprint("test.noop", payload)]
        assert state_of(crasher) == "quarantined"
        return job_id

    return case


for _state in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE):
    transition(_state, Event.QUARANTINE, State.QUARANTINED)(_quarantined_by_fingerprint(_state))


# -- operator repairs of finished jobs -------------------------------------------------


def _operator_retry(state: State) -> Case:
    def case() -> str:
        job_id, _ = job_in_state(state)
        store.job_operator_retry(job_id)
        after = row(job_id)
        assert (after["attempt"], after["crash_attempt"]) == (0, 0)
        assert (after["finalized_at"], after["expires_at"]) == (None, None)
        assert near(after["scheduled_at"], store.db_now())
        return job_id

    return case


for _state in (State.ARCHIVED, State.CANCELLED, State.UNDECODABLE):
    transition(_state, Event.OPERATOR_RETRY, State.AVAILABLE)(_operator_retry(_state))


@transition(State.QUARANTINED, Event.OPERATOR_RELEASE, State.AVAILABLE)
def release_quarantine() -> str:
    payload = unique_payload()
    job_id, _ = job_in_state(State.QUARANTINED, payload=payload)
    assert store.quarantine_release(fingerprint("test.noop", payload)) == 1
    assert not Quarantine.objects.exists()
    assert row(job_id)["crash_attempt"] == 0
    return job_id


# -- uniqueness modes and deadlines -----------------------------------------------------


def _holder(state: State, key: str) -> str:
    """A job in waiting ``state`` holding lifecycle key ``key``."""
    job_id, _ = job_in_state(state, unique_key=key)
    return job_id


def _take_over(src: State, event: Event, target: State, **mode: object) -> Case:
    def case() -> str:
        key = f"{src.value}-{event.value}-{target.value}"
        job_id = _holder(src, key)
        queue = row(job_id)["queue"]
        done = enqueue_one(envelope(queue=queue, unique_key=key, **mode))
        assert done == store.Inserted(job_id, True)
        return job_id

    return case


_NOW = {"unique_replace": {"scheduled_at", "priority"}}
_LATER = {"unique_replace": {"scheduled_at"}, "delay": timedelta(hours=2)}
_DEBOUNCE = {"unique_debounce": timedelta(hours=1)}
transition(State.SCHEDULED, Event.UNIQUE_REPLACE, State.AVAILABLE)(
    _take_over(State.SCHEDULED, Event.UNIQUE_REPLACE, State.AVAILABLE, **_NOW)
)
transition(State.SCHEDULED, Event.UNIQUE_REPLACE, State.SCHEDULED)(
    _take_over(State.SCHEDULED, Event.UNIQUE_REPLACE, State.SCHEDULED, **_LATER)
)
for _state in (State.AVAILABLE, State.RETRYABLE):
    transition(_state, Event.UNIQUE_REPLACE, _state)(
        _take_over(_state, Event.UNIQUE_REPLACE, _state, unique_replace={"priority"})
    )
for _state, _target in (
    (State.SCHEDULED, State.SCHEDULED),
    (State.AVAILABLE, State.SCHEDULED),
    (State.RETRYABLE, State.RETRYABLE),
):
    transition(_state, Event.DEBOUNCE, _target)(
        _take_over(_state, Event.DEBOUNCE, _target, **_DEBOUNCE)
    )


def _deadline(src: State) -> Case:
    def case() -> str:
        soon = timedelta(milliseconds=100)
        if src is State.RUNNING:
            job_id = enqueue_job(deadline=soon)
            ref = claim(job_id).ref
            time.sleep(0.2)
            assert store.job_renew_leases([ref], lease_ttl=LONG) == {job_id}
        else:
            job_id, _ = job_in_state(src, deadline=soon)
            time.sleep(0.2)
            assert job_id in job_archive_past_deadline()
        assert row(job_id)["errors"][-1]["kind"] == "deadline_exceeded"
        return job_id

    return case


for _state in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE, State.RUNNING):
    transition(_state, Event.DEADLINE, State.ARCHIVED)(_deadline(_state))


# -- the tests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "event", "target"), sorted(CASES), ids=lambda x: x.value if hasattr(x, "value") else x
)
def test_transition(src: State, event: Event, target: State):
    job_id = CASES[(src, event, target)]()
    expected = None if target is State.DELETED else target.value
    assert state_of(job_id) == expected


def test_every_transition_is_driven():
    assert {(src, event) for src, event, _ in CASES} == set(TRANSITIONS)
    for (src, event), targets in TRANSITIONS.items():
        assert {t for s, e, t in CASES if (s, e) == (src, event)} == targets, (src, event)

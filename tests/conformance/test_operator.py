"""Operator verbs: what they may do, what they refuse, and that a refusal changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from headgate_django import enqueue, store, testing
from headgate_django.envelope import encode_call, fingerprint
from headgate_django.exceptions import (
    DefinitionError,
    DuplicateError,
    InvalidTransitionError,
    NotFoundError,
)
from headgate_django.kernel.states import TRANSITIONS, Event, State
from headgate_django.models import Job
from tests.conformance.helpers import (
    LONG,
    WORKER,
    enqueue_job,
    envelope,
    job_in_state,
    near,
    row,
    state_of,
)

pytestmark = pytest.mark.django_db

STORED_STATES = [s for s in State if s is not State.DELETED]

VERBS: dict[Event, Callable[[str], object]] = {
    Event.OPERATOR_RETRY: store.job_operator_retry,
    Event.OPERATOR_PROMOTE: store.job_promote,
    Event.OPERATOR_SCHEDULE: lambda job_id: store.job_reschedule(job_id, delay=timedelta(hours=2)),
}
FORBIDDEN = [
    (event, state)
    for event in VERBS
    for state in STORED_STATES
    if (state, event) not in TRANSITIONS
]


@pytest.mark.parametrize(
    ("event", "state"), FORBIDDEN, ids=[f"{e.value}-from-{s.value}" for e, s in FORBIDDEN]
)
def test_forbidden_moves_raise_and_change_nothing(event: Event, state: State):
    job_id, _ = job_in_state(state)
    before = row(job_id)
    with pytest.raises(InvalidTransitionError) as info:
        VERBS[event](job_id)
    assert info.value.details == {"state": state.value, "event": event.value}
    assert row(job_id) == before


@pytest.mark.parametrize(
    "state",
    [State.COMPLETED, State.ARCHIVED, State.CANCELLED, State.QUARANTINED, State.UNDECODABLE],
)
def test_cancelling_a_finished_job_reports_false_and_changes_nothing(state: State):
    job_id, _ = job_in_state(state)
    before = row(job_id)
    assert store.job_cancel(job_id) is False
    assert row(job_id) == before


@pytest.mark.parametrize("state", [State.RUNNING, State.COMPLETED])
def test_payload_of_a_running_or_completed_job_cannot_be_replaced(state: State):
    job_id, _ = job_in_state(state)
    before = row(job_id)
    with pytest.raises(InvalidTransitionError):
        store.job_replace_payload(job_id, payload=b"{}")
    assert row(job_id) == before


def test_a_running_job_cannot_be_deleted():
    job_id, _ = job_in_state(State.RUNNING)
    before = row(job_id)
    with pytest.raises(InvalidTransitionError, match="cancel it first"):
        store.job_delete(job_id)
    assert row(job_id) == before


@pytest.mark.parametrize("state", [State.AVAILABLE, State.COMPLETED, State.QUARANTINED])
def test_delete(state: State):
    job_id, _ = job_in_state(state)
    store.job_delete(job_id)
    assert not Job.objects.filter(pk=job_id).exists()


@pytest.mark.parametrize(
    "verb",
    [
        store.job_operator_retry,
        store.job_promote,
        store.job_cancel,
        store.job_delete,
        lambda job_id: store.job_reschedule(job_id, delay=timedelta(1)),
        lambda job_id: store.job_replace_payload(job_id, payload=b"{}"),
    ],
    ids=["retry", "promote", "cancel", "delete", "reschedule", "replace-payload"],
)
def test_unknown_job_is_not_found(verb):
    with pytest.raises(NotFoundError):
        verb("no-such-job")


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"at": datetime(2030, 1, 1, tzinfo=UTC), "delay": timedelta(1)},
        {"at": datetime(2030, 1, 1)},
        {"delay": timedelta(days=10**8)},  # past the year 9999 on the store clock
    ],
    ids=["neither", "both", "naive", "past-9999"],
)
def test_reschedule_needs_one_aware_instant(kwargs):
    job_id, _ = job_in_state(State.PENDING)
    before = row(job_id)
    with pytest.raises(DefinitionError):
        store.job_reschedule(job_id, **kwargs)
    assert row(job_id) == before


def test_promote_a_pending_job_then_it_runs():
    job_id = enqueue(envelope(kind="test.echo", pending=True))[0]
    assert testing.run_jobs(include_scheduled=True).outcomes == []  # pending never self-starts
    store.job_promote(job_id)
    assert testing.run_jobs().outcomes == [(job_id, "completed")]


def test_replace_an_undecodable_payload_then_retry():
    [job_id] = enqueue(envelope(kind="test.echo", payload=b"\xff\xfe not json"))
    assert testing.run_one() == (job_id, "undecodable")
    good = encode_call((), {"value": "fixed"})
    store.job_replace_payload(job_id, payload=good)
    after = row(job_id)
    assert (after["state"], after["payload"]) == ("undecodable", good)
    assert after["fingerprint"] == fingerprint("test.echo", good)
    store.job_operator_retry(job_id)
    assert testing.run_one() == (job_id, "completed")
    assert row(job_id)["result"] == {"value": "fixed", "attempt": 1}


def test_replace_payload_can_set_the_schema_version():
    [job_id] = enqueue(envelope(kind="test.echo", schema_version=7))  # newer than the handler
    assert testing.run_one() == (job_id, "undecodable")
    store.job_replace_payload(job_id, payload=encode_call((), {"value": 1}), schema_version=1)
    assert row(job_id)["schema_version"] == 1
    store.job_operator_retry(job_id)
    assert testing.run_one() == (job_id, "completed")
    with pytest.raises(DefinitionError):
        store.job_replace_payload(job_id, payload=b"{}", schema_version=0)


def test_operator_retry_refuses_a_unique_key_taken_meanwhile():
    old, _ = job_in_state(State.ARCHIVED, unique_key="nightly")
    [new] = enqueue(envelope(unique_key="nightly"))  # archived jobs do not hold the key
    before = row(old)
    with pytest.raises(DuplicateError) as info:
        store.job_operator_retry(old)
    assert info.value.existing_id == new
    assert row(old) == before


def test_quarantine_release_refuses_a_unique_key_taken_meanwhile():
    old, _ = job_in_state(State.QUARANTINED, unique_key="nightly")
    [new] = enqueue(envelope(unique_key="nightly"))
    before = row(old)
    with pytest.raises(DuplicateError) as info:
        store.quarantine_release(row(old)["fingerprint"])
    assert info.value.existing_id == new
    assert row(old) == before


def test_a_paused_queue_is_skipped_by_every_claim():
    job_id = enqueue_job(queue="reports")
    store.queue_set_paused("reports", True)
    assert store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG) == []
    assert store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG, queues=["reports"]) == []
    store.queue_set_paused("reports", False)
    claimed = store.job_claim(worker_id=WORKER, limit=5, lease_ttl=LONG)
    assert [c.ref.job_id for c in claimed] == [job_id]


def test_reschedule_at_an_instant():
    job_id, _ = job_in_state(State.SCHEDULED)
    at = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    store.job_reschedule(job_id, at=at)
    assert (state_of(job_id), row(job_id)["scheduled_at"]) == ("scheduled", at)
    store.job_reschedule(job_id, delay=timedelta(minutes=3))
    assert near(row(job_id)["scheduled_at"], store.db_now() + timedelta(minutes=3))

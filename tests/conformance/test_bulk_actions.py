"""Bulk operator actions (``headgate_django.bulk``): a filter, a count guard that changes
nothing on a mismatch, set-based writes that follow the state table, a hard cap, internal
jobs refused, and the large case run as an internal job with progress."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import override_settings

from headgate_django import bulk, enqueue, testing
from headgate_django.exceptions import (
    BulkLimitError,
    CountMismatchError,
    DefinitionError,
    InternalKindError,
)
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store import db_now
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.conformance.helpers import enqueue_job, fresh_queue, job_in_state, row, state_of

pytestmark = pytest.mark.django_db


def in_states(queue: str, *states: State) -> list[str]:
    return [job_in_state(s, queue=queue)[0] for s in states]


def test_retry_moves_the_finished_jobs_it_may_and_counts_the_rest():
    q = fresh_queue()
    archived, cancelled, running = in_states(q, State.ARCHIVED, State.CANCELLED, State.RUNNING)
    result = bulk.perform("retry", expected_count=3, queue=q)
    assert (result.matched, result.changed, result.job_id) == (3, 2, None)
    assert state_of(archived) == state_of(cancelled) == "available"
    assert row(archived)["attempt"] == 0 and row(archived)["finalized_at"] is None
    assert state_of(running) == "running"


def test_a_count_mismatch_changes_nothing_and_says_the_actual_count():
    q = fresh_queue()
    ids = in_states(q, State.ARCHIVED, State.ARCHIVED)
    before = [row(i) for i in ids]
    with pytest.raises(CountMismatchError) as caught:
        bulk.perform("retry", expected_count=3, queue=q)
    assert caught.value.details == {"expected_count": 3, "actual_count": 2}
    assert [row(i) for i in ids] == before


def test_filters_combine_states_kind_and_instants():
    q = fresh_queue()
    old = enqueue_job(queue=q)
    time.sleep(0.005)
    cut = db_now()
    time.sleep(0.005)
    new_one, other_kind = enqueue_job(queue=q), enqueue_job(queue=q, kind="test.echo")
    assert bulk.perform(
        "cancel", expected_count=1, queue=q, kind="test.noop", enqueued_after=cut
    ) == bulk.BulkResult("cancel", 1, changed=1)
    assert [state_of(i) for i in (old, new_one, other_kind)] == [
        "available",
        "cancelled",
        "available",
    ]
    time.sleep(0.005)  # "before" is strict, and SQLite's clock ticks in milliseconds
    finished = bulk.perform(
        "delete", expected_count=1, queue=q, states=["cancelled"], finalized_before=db_now()
    )
    assert finished.changed == 1 and state_of(new_one) is None


def test_cancel_delete_promote_and_reschedule_follow_the_state_table():
    q = fresh_queue()
    pending, scheduled, running, done = in_states(
        q, State.PENDING, State.SCHEDULED, State.RUNNING, State.COMPLETED
    )
    later = bulk.perform(
        "reschedule", expected_count=2, ids=[pending, done], delay=timedelta(hours=2)
    )
    assert later.changed == 1 and state_of(pending) == "scheduled"
    at = db_now() + timedelta(days=1)
    assert bulk.perform("reschedule", expected_count=1, ids=[pending], at=at).changed == 1
    assert abs(row(pending)["scheduled_at"] - at) < timedelta(seconds=1)
    assert bulk.perform("promote", expected_count=4, queue=q).changed == 2
    assert state_of(pending) == state_of(scheduled) == "available"
    assert bulk.perform("delete", expected_count=4, queue=q).changed == 3
    assert state_of(running) == "running" and Job.objects.filter(queue=q).count() == 1
    assert bulk.perform("cancel", expected_count=1, queue=q).changed == 1
    assert row(running)["lease_id"] is None and state_of(running) == "cancelled"


def test_retry_brings_back_one_job_per_unique_key():
    q = fresh_queue()
    first, _ = job_in_state(State.ARCHIVED, queue=q, unique_key="k-1")
    second, _ = job_in_state(State.ARCHIVED, queue=q, unique_key="k-1")
    assert bulk.perform("retry", expected_count=2, queue=q).changed == 1
    assert sorted([state_of(first), state_of(second)]) == ["archived", "available"]


def test_internal_jobs_are_never_selected_and_naming_one_is_refused():
    enqueue(Workflow("bulk-wf").add("a", tasks.noop.envelope(), []).prepare())
    coordinator = Job.objects.get(workflow_id="bulk-wf", kind="headgate:workflow")
    with pytest.raises(InternalKindError):
        bulk.perform("cancel", expected_count=1, kind="headgate:workflow")
    with pytest.raises(InternalKindError):
        bulk.perform("cancel", expected_count=1, ids=[coordinator.id])
    queue = coordinator.queue
    assert bulk.perform("cancel", expected_count=0, queue=queue).matched == 0
    assert state_of(coordinator.id) != "cancelled"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bulk.perform("retry", expected_count=0), "at least one filter"),
        (lambda: bulk.perform("archive", expected_count=0, queue="q"), "unknown bulk action"),
        (lambda: bulk.perform("retry", expected_count=-1, queue="q"), "expected_count"),
        (lambda: bulk.perform("retry", expected_count=0, shelf="q"), "unknown bulk filter"),
        (lambda: bulk.perform("retry", expected_count=0, states="archived"), "a list"),
        (lambda: bulk.perform("retry", expected_count=0, states=["gone"]), "unknown state"),
        (lambda: bulk.perform("reschedule", expected_count=0, queue="q"), "exactly one"),
        (
            lambda: bulk.perform(
                "reschedule", expected_count=0, queue="q", delay=timedelta(days=10**8)
            ),
            "at most 36500 days",
        ),
        (
            lambda: bulk.perform("retry", expected_count=0, queue="q", delay=timedelta(1)),
            "takes no",
        ),
    ],
)
def test_bad_requests_are_refused_before_anything_is_read(call, message):
    with pytest.raises(DefinitionError, match=message):
        call()


def test_naive_instants_are_refused():
    naive = db_now().replace(tzinfo=None)
    with pytest.raises(DefinitionError, match="timezone-aware"):
        bulk.perform("retry", expected_count=0, enqueued_after=naive)
    with pytest.raises(DefinitionError, match="timezone-aware"):
        bulk.perform("reschedule", expected_count=0, queue="q", at=naive)


def test_more_than_the_cap_is_refused_and_nothing_changes():
    q = fresh_queue()
    ids = in_states(q, State.ARCHIVED, State.ARCHIVED, State.ARCHIVED)
    limits = override_settings(HEADGATE={"BULK_MAX_JOBS": 2, "BULK_SYNC_LIMIT": 2})
    with limits, pytest.raises(BulkLimitError) as caught:
        bulk.perform("retry", expected_count=3, queue=q)
    assert caught.value.details == {"limit": 2}
    assert {state_of(i) for i in ids} == {"archived"}


def test_ids_past_one_bulk_jobs_payload_are_refused_as_a_bulk_limit():
    q = fresh_queue()
    ids = [enqueue_job(queue=q, id=f"{q}-{'x' * 200}-{i}") for i in range(8)]
    limits = override_settings(HEADGATE={"BULK_SYNC_LIMIT": 2, "MAX_PAYLOAD_BYTES": 1024})
    with limits, pytest.raises(BulkLimitError, match="MAX_PAYLOAD_BYTES") as caught:
        bulk.perform("cancel", expected_count=8, queue=q)
    assert 0 < caught.value.details["limit"] < 8
    assert Job.objects.filter(kind="headgate:bulk-action").count() == 0
    assert {state_of(i) for i in ids} == {"available"}


def test_above_the_sync_limit_an_internal_job_does_it_in_chunks(monkeypatch):
    monkeypatch.setattr(bulk, "CHUNK", 2)
    q = fresh_queue()
    ids = in_states(q, *[State.ARCHIVED] * 5)
    with override_settings(HEADGATE={"BULK_SYNC_LIMIT": 3}):
        result = bulk.perform("retry", expected_count=5, queue=q)
    assert result.matched == 5 and result.changed is None
    job = Job.objects.get(pk=result.job_id)
    assert (job.kind, job.queue, job.state) == (
        "headgate:bulk-action",
        "headgate-bulk",
        "available",
    )
    assert {state_of(i) for i in ids} == {"archived"}  # nothing yet: the job does it
    assert testing.run_one(queues=["headgate-bulk"]) == (result.job_id, "completed")
    assert {state_of(i) for i in ids} == {"available"}
    job.refresh_from_db()
    assert job.result == {"matched": 5, "changed": 5}
    assert job.progress == {"current": 5, "total": 5, "message": "retry: 5 changed"}
    with pytest.raises(InternalKindError):
        bulk.perform("cancel", expected_count=1, ids=[result.job_id])

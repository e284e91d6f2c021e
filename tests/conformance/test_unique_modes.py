"""Uniqueness modes beside the lifecycle key: throttle (a window on the store clock),
replace on conflict, debounce. Each refusal writes nothing; each mode's bad input is a
clear error before anything is written."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from headgate_django import Envelope, enqueue, store, task
from headgate_django.enqueue import enqueue_one
from headgate_django.exceptions import (
    BatchError,
    DefinitionError,
    DuplicateError,
    QuarantinedError,
)
from headgate_django.models import Job, Quarantine, UniqueWindow
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import claim, envelope, fresh_queue, row, state_of, unique_payload

pytestmark = pytest.mark.django_db

WINDOW = timedelta(milliseconds=300)
ZERO = timedelta(0)


@pytest.fixture
def nothing_written():
    """Fails the test if a job or a throttle window was written, even partly."""
    before = (Job.objects.count(), UniqueWindow.objects.count())
    yield
    assert (Job.objects.count(), UniqueWindow.objects.count()) == before


def _finish(job_id: str, *, delete: bool = False) -> None:
    store.job_complete_many([Completion(claim(job_id).ref, delete=delete)])


# -- throttle ---------------------------------------------------------------------------


def test_throttle_holds_the_key_past_the_jobs_end_until_the_window_lapses():
    first = store.job_insert_many([envelope(unique_key="t1", unique_window=WINDOW)])[0]
    _finish(first)
    assert state_of(first) == "completed"
    with pytest.raises(DuplicateError) as caught:
        store.job_insert_many([envelope(unique_key="t1", unique_window=WINDOW)])
    assert caught.value.existing_id == first
    assert caught.value.replaced is False
    time.sleep(WINDOW.total_seconds() + 0.05)
    second = store.job_insert_many([envelope(unique_key="t1", unique_window=WINDOW)])[0]
    assert second != first
    assert UniqueWindow.objects.get(pk="t1").job_id == second


def test_throttle_survives_a_job_deleted_at_its_ack():
    first = store.job_insert_many(
        [envelope(unique_key="t2", unique_window=WINDOW, retention=timedelta(0))]
    )[0]
    _finish(first, delete=True)
    assert state_of(first) is None
    with pytest.raises(DuplicateError):
        store.job_insert_many([envelope(unique_key="t2", unique_window=WINDOW)])


def test_throttled_key_is_not_a_lifecycle_key():
    """The job row carries no unique_key: a lifecycle enqueue of the same key is not
    opposed, and the throttled one does not hold it while live."""
    throttled = store.job_insert_many([envelope(unique_key="t3", unique_window=WINDOW)])[0]
    assert row(throttled)["unique_key"] is None
    store.job_insert_many([envelope(unique_key="t3")])


def test_a_throttled_key_and_the_same_lifecycle_key_go_together_in_one_batch():
    """As in two calls: the window and the lifecycle key are separate claims on a key."""
    throttled, lifecycle = store.job_insert_many(
        [envelope(unique_key="t4", unique_window=WINDOW), envelope(unique_key="t4")]
    )
    assert UniqueWindow.objects.get(pk="t4").job_id == throttled
    assert row(lifecycle)["unique_key"] == "t4"


@pytest.mark.parametrize("window", [WINDOW, None], ids=["throttled", "lifecycle"])
def test_the_same_key_twice_in_one_batch_is_refused(window, nothing_written):
    with pytest.raises(DuplicateError, match="appears twice in one batch"):
        store.job_insert_many([envelope(unique_key="t5", unique_window=window) for _ in range(2)])


def test_throttle_repeat_of_the_same_caller_id_is_idempotent():
    env = envelope(id="throttled-1", unique_key="t4", unique_window=WINDOW)
    assert store.job_insert_many([env]) == ["throttled-1"]
    assert store.job_insert_many([env]) == ["throttled-1"]
    assert Job.objects.filter(pk="throttled-1").count() == 1


def test_throttle_repeat_of_a_caller_id_deleted_at_its_ack_makes_no_second_job():
    """The window outlives the job's row (retention 0, or evicted): a repeat of its id
    within the window is the idempotent repeat it was while the row existed, not a new job
    that runs a second time in the window."""
    window = timedelta(minutes=10)
    env = envelope(id="throttled-2", unique_key="t4b", unique_window=window, retention=ZERO)
    assert store.job_insert_many([env]) == ["throttled-2"]
    _finish("throttled-2", delete=True)
    assert state_of("throttled-2") is None
    assert store.job_insert_many([env]) == ["throttled-2"]
    assert enqueue_one(env) == ("throttled-2", False)
    other = envelope(unique_key="t4c", unique_window=window)
    assert len(store.job_insert_many([other, env])) == 2
    assert state_of("throttled-2") is None
    assert Job.objects.filter(unique_key__isnull=True, kind=env.kind).count() == 1
    assert UniqueWindow.objects.get(pk="t4b").job_id == "throttled-2"


def test_throttle_batch_is_all_or_nothing():
    store.job_insert_many([envelope(unique_key="t5", unique_window=WINDOW)])
    before = (Job.objects.count(), UniqueWindow.objects.count())
    with pytest.raises(DuplicateError):
        store.job_insert_many(
            [
                envelope(unique_key="t6", unique_window=WINDOW),
                envelope(unique_key="t5", unique_window=WINDOW),
            ]
        )
    assert (Job.objects.count(), UniqueWindow.objects.count()) == before


def test_throttle_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        store.job_insert_many([envelope(unique_key="t7", unique_window=WINDOW)])
        raise RuntimeError
    assert not UniqueWindow.objects.filter(pk="t7").exists()
    store.job_insert_many([envelope(unique_key="t7", unique_window=WINDOW)])


def test_lapsed_windows_are_swept():
    store.job_insert_many([envelope(unique_key="t8", unique_window=timedelta(milliseconds=10))])
    time.sleep(0.05)
    assert store.unique_window_evict() >= 1
    assert not UniqueWindow.objects.filter(pk="t8").exists()


# -- replace on conflict ----------------------------------------------------------------


def test_replace_gives_a_waiting_holder_the_new_values():
    queue = fresh_queue()
    holder = store.job_insert_many([envelope(queue=queue, unique_key="r1", priority=1)])[0]
    new = envelope(
        queue=queue,
        unique_key="r1",
        payload=unique_payload(v=2),
        priority=7,
        max_attempts=3,
        unique_replace={"payload", "priority", "max_attempts"},
    )
    done = enqueue_one(new)
    assert done == store.Inserted(holder, True)
    after = row(holder)
    assert (after["payload"], after["priority"], after["max_attempts"]) == (new.payload, 7, 3)
    assert after["fingerprint"] == new.fingerprint
    assert Job.objects.filter(unique_key="r1").count() == 1
    # enqueue() answers with the holder's id as well.
    assert enqueue(dataclasses.replace(new, priority=9)) == [holder]
    assert row(holder)["priority"] == 9


def test_replace_moves_only_a_scheduled_holders_run_time():
    queue = fresh_queue()
    holder = store.job_insert_many(
        [envelope(queue=queue, unique_key="r2", delay=timedelta(hours=1))]
    )[0]
    enqueue_one(envelope(queue=queue, unique_key="r2", unique_replace={"scheduled_at"}))
    assert state_of(holder) == "available"
    later = envelope(
        queue=queue, unique_key="r2", delay=timedelta(hours=2), unique_replace={"scheduled_at"}
    )
    before = row(holder)["scheduled_at"]
    enqueue_one(later)  # the holder is available now: its run time stays
    assert state_of(holder) == "available"
    assert row(holder)["scheduled_at"] == before


def test_replace_refuses_a_running_holder_and_changes_nothing():
    queue = fresh_queue()
    holder = store.job_insert_many([envelope(queue=queue, unique_key="r3")])[0]
    claim(holder)
    before = row(holder)
    with pytest.raises(DuplicateError) as caught:
        enqueue_one(envelope(queue=queue, unique_key="r3", priority=5, unique_replace={"priority"}))
    assert (caught.value.existing_id, caught.value.replaced) == (holder, False)
    assert "running" in str(caught.value)
    assert row(holder) == before


@pytest.mark.parametrize(
    "mode",
    [{"unique_debounce": timedelta(seconds=30)}, {"unique_replace": {"payload", "priority"}}],
    ids=["debounce", "replace"],
)
def test_a_holder_of_another_kind_takes_nothing(mode):
    """A unique key is one namespace for every kind: a holder of another kind must not
    take this kind's payload, which it would run with its own handler (and under a
    fingerprint of a kind it is not); the enqueue is refused as a lifecycle duplicate."""
    holder = store.job_insert_many([envelope(kind="test.noop", unique_key="r-kind")])[0]
    before = row(holder)
    other = Envelope(kind="test.echo", unique_key="r-kind", payload=b'{"value":1}', **mode)
    with pytest.raises(DuplicateError) as caught:
        enqueue_one(other)
    assert (caught.value.existing_id, caught.value.replaced) == (holder, False)
    assert "test.noop" in str(caught.value)
    assert row(holder) == before
    assert Job.objects.count() == 1


def test_replace_without_a_holder_inserts():
    done = enqueue_one(envelope(unique_key="r4", unique_replace={"payload"}))
    assert done.replaced is False
    assert row(done.id)["unique_key"] == "r4"


def test_replace_with_a_quarantined_payload_is_refused():
    queue = fresh_queue()
    holder = store.job_insert_many([envelope(queue=queue, unique_key="r5")])[0]
    new = envelope(
        queue=queue, unique_key="r5", payload=unique_payload(), unique_replace={"payload"}
    )
    Quarantine.objects.create(
        fingerprint=new.fingerprint, kind=new.kind, quarantined_at=timezone.now()
    )
    before = row(holder)
    with pytest.raises(QuarantinedError):
        enqueue_one(new)
    assert row(holder) == before


def test_replace_and_debounce_are_single_job_only(nothing_written):
    for mode in ({"unique_replace": {"payload"}}, {"unique_debounce": timedelta(seconds=1)}):
        with pytest.raises(BatchError, match="on its own"):
            store.job_insert_many([envelope(), envelope(unique_key="b1", **mode)])


# -- debounce ---------------------------------------------------------------------------


def test_debounce_runs_after_the_last_enqueue_with_its_payload():
    queue = fresh_queue()
    debounce = timedelta(seconds=30)
    first = enqueue_one(envelope(queue=queue, unique_key="d1", unique_debounce=debounce))
    assert first.replaced is False
    assert state_of(first.id) == "scheduled"
    scheduled = row(first.id)["scheduled_at"]
    time.sleep(0.02)
    payload = unique_payload(last=True)
    again = enqueue_one(
        envelope(queue=queue, unique_key="d1", payload=payload, unique_debounce=debounce)
    )
    assert again == store.Inserted(first.id, True)
    after = row(first.id)
    assert after["payload"] == payload
    assert after["scheduled_at"] > scheduled
    assert Job.objects.filter(unique_key="d1").count() == 1


def test_debounce_moves_an_available_holder_back_to_scheduled():
    queue = fresh_queue()
    holder = store.job_insert_many([envelope(queue=queue, unique_key="d2")])[0]
    assert state_of(holder) == "available"
    enqueue_one(envelope(queue=queue, unique_key="d2", unique_debounce=timedelta(seconds=5)))
    assert state_of(holder) == "scheduled"


# -- bad input --------------------------------------------------------------------------

BAD = {
    "two-modes": {"unique_window": WINDOW, "unique_debounce": WINDOW},
    "zero-window": {"unique_window": timedelta(0)},
    "window-not-a-span": {"unique_window": 5},
    "unknown-replace-field": {"unique_replace": {"payload", "queue"}},
    "empty-replace": {"unique_replace": set()},
    "replace-as-a-string": {"unique_replace": "payload"},
    "debounce-with-delay": {"unique_debounce": WINDOW, "delay": WINDOW},
}


@pytest.mark.parametrize("fields", BAD.values(), ids=BAD.keys())
def test_bad_modes_are_refused_before_anything_is_written(fields, nothing_written):
    with pytest.raises(DefinitionError):
        store.job_insert_many([envelope(), envelope(unique_key="bad", **fields)])


@pytest.mark.parametrize("mode", [{"unique_window": WINDOW}, {"unique_replace": {"payload"}}])
def test_a_mode_without_a_key_is_refused(mode, nothing_written):
    with pytest.raises(DefinitionError, match="needs a unique_key"):
        store.job_insert_many([envelope(**mode)])


def test_task_takes_the_modes_and_validates_them_at_decoration():
    @task(kind="test.debounced", unique_key="reindex", unique_debounce=timedelta(seconds=5))
    def reindex(ctx, **kwargs):
        return None

    first = reindex.enqueue(part=1)
    assert reindex.enqueue(part=2) == first
    assert Job.objects.filter(unique_key="reindex").count() == 1
    with pytest.raises(DefinitionError):

        @task(kind="test.bad-replace", unique_replace={"queue"})
        def bad(ctx):
            return None


def test_envelope_keeps_a_replace_set_hashable():
    env = Envelope(kind="test.noop", unique_key="h", unique_replace={"payload"})
    store.job_insert_many([env])
    assert env.unique_replace == frozenset({"payload"})
    hash(env)

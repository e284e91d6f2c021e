"""Fencing: a write lands only under the lease that currently holds the job.

The scenario is always two attempts at one job: the first worker's lease lapses and is
reclaimed, a second worker claims the job (new ``lease_id``, ``fence`` + 1), and then
the first worker wakes up and tries every kind of write it could make.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import store
from headgate_django.context import JobContext
from headgate_django.exceptions import LeaseLostError
from headgate_django.kernel.states import State
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.fenced import Completion, LeaseRef
from tests.conformance.helpers import (
    LONG,
    WORKER,
    claim,
    crash,
    enqueue_job,
    envelope,
    fresh_queue,
    job_in_state,
    near,
    row,
    state_of,
    unique_payload,
)

pytestmark = pytest.mark.django_db


def _single(write: Callable[[LeaseRef], Any]) -> Callable[[LeaseRef], bool]:
    """A single-job write: ``True`` if it landed, ``False`` if it raised LeaseLostError."""

    def attempt(ref: LeaseRef) -> bool:
        try:
            write(ref)
        except LeaseLostError:
            return False
        return True

    return attempt


#: Every write a worker makes about a job it holds, reduced to "did it land?".
WRITES: dict[str, Callable[[LeaseRef], bool]] = {
    "ack": lambda ref: (
        store.job_complete_many([Completion(ref, {"by": ref.fence})]) == {ref.job_id}
    ),
    "ack-delete": lambda ref: (
        store.job_complete_many([Completion(ref, delete=True)]) == {ref.job_id}
    ),
    "renew": lambda ref: store.job_renew_leases([ref], lease_ttl=LONG) == set(),
    "release": lambda ref: store.job_release_many([ref]) == {ref.job_id},
    "retry": _single(lambda ref: store.job_retry(ref, error="late failure")),
    "snooze": _single(lambda ref: store.job_snooze(ref, delay=timedelta(minutes=1))),
    "skip": _single(lambda ref: store.job_skip(ref, reason="late skip")),
    "revoke": _single(lambda ref: store.job_revoke(ref, reason="late revoke")),
    "undecodable": _single(lambda ref: store.job_mark_undecodable(ref, reason="late")),
    "checkpoint": _single(lambda ref: store.job_save_checkpoint(ref, {"step": ref.fence})),
    "cursor": _single(lambda ref: store.job_set_cursor(ref, b"page-9", {"cursor_step": "s"})),
    "progress": _single(
        lambda ref: store.job_save_progress(ref, {"current": 1, "total": 2, "message": ""})
    ),
    "result": _single(lambda ref: store.job_save_result(ref, {"partial": ref.fence})),
}


def _running() -> tuple[str, ClaimedJob]:
    job_id, claimed = job_in_state(State.RUNNING)
    assert claimed is not None
    return job_id, claimed


def _two_attempts() -> tuple[LeaseRef, LeaseRef]:
    """The old attempt's lease (reclaimed) and the new attempt's, on the same job."""
    job_id = enqueue_job()
    old, report = crash(job_id)
    assert report.retried == [job_id]
    store.job_promote(job_id)
    new = claim(job_id)
    assert new.ref.fence == old.ref.fence + 1 == 2
    assert new.ref.lease_id != old.ref.lease_id
    return old.ref, new.ref


@pytest.mark.parametrize("write", sorted(WRITES))
def test_old_attempt_cannot_write_after_reclaim(write: str):
    old, new = _two_attempts()
    before = row(old.job_id)
    assert (before["state"], before["lease_id"]) == ("running", new.lease_id)
    assert WRITES[write](old) is False
    assert row(old.job_id) == before


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("forged", ["new-lease-old-fence", "old-lease-new-fence"])
def test_lease_id_and_fence_each_fence_on_their_own(write: str, forged: str):
    old, new = _two_attempts()
    if forged == "new-lease-old-fence":
        ref = LeaseRef(job_id=new.job_id, lease_id=new.lease_id, fence=old.fence)
    else:
        ref = LeaseRef(job_id=new.job_id, lease_id=old.lease_id, fence=new.fence)
    before = row(new.job_id)
    assert WRITES[write](ref) is False
    assert row(new.job_id) == before


@pytest.mark.parametrize("write", sorted(WRITES))
def test_old_attempt_cannot_write_while_the_job_waits_for_its_retry(write: str):
    job_id = enqueue_job()
    old, _ = crash(job_id)
    assert state_of(job_id) == "retryable"
    before = row(job_id)
    assert WRITES[write](old.ref) is False
    assert row(job_id) == before


EXPECTED_AFTER_NEW_WRITE: dict[str, tuple[str | None, dict[str, Any]]] = {
    "ack": ("completed", {"result": {"by": 2}}),
    "ack-delete": (None, {}),
    "renew": ("running", {}),
    "release": ("available", {"lease_id": None, "attempt": 0}),
    "retry": ("retryable", {"attempt": 1}),
    "snooze": ("scheduled", {"attempt": 0}),
    "skip": ("archived", {"attempt": 0}),
    "revoke": (None, {}),
    "undecodable": ("undecodable", {"attempt": 0}),
    "checkpoint": ("running", {"checkpoint": {"step": 2}}),
    "cursor": ("running", {"cp_cursor": b"page-9", "checkpoint": {"cursor_step": "s"}}),
    "progress": ("running", {"progress": {"current": 1, "total": 2, "message": ""}}),
    "result": ("running", {"result": {"partial": 2}}),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_new_attempt_writes_land(write: str):
    _, new = _two_attempts()
    assert WRITES[write](new) is True
    state, values = EXPECTED_AFTER_NEW_WRITE[write]
    assert state_of(new.job_id) == state
    if state is not None:
        after = row(new.job_id)
        assert {k: after[k] for k in values} == values
        assert after["crash_attempt"] == 1


def test_renewal_extends_the_lease_on_the_store_clock():
    job_id, claimed = _running()
    assert store.job_renew_leases([claimed.ref], lease_ttl=timedelta(hours=2)) == set()
    assert near(row(job_id)["lease_expires_at"], store.db_now() + timedelta(hours=2))


def test_a_batch_renewal_reports_only_the_lost_leases():
    job_a, held = _running()
    old, new = _two_attempts()
    held_before, new_before = row(job_a), row(new.job_id)
    lost = store.job_renew_leases([held.ref, old], lease_ttl=timedelta(hours=1))
    assert lost == {old.job_id}
    assert near(row(job_a)["lease_expires_at"], store.db_now() + timedelta(hours=1))
    assert row(job_a)["lease_expires_at"] > held_before["lease_expires_at"]
    assert row(new.job_id) == new_before


def test_a_batch_ack_lands_only_for_held_leases():
    job_a, held = _running()
    old, new = _two_attempts()
    done = store.job_complete_many([Completion(held.ref, 1), Completion(old, 2)])
    assert done == {job_a}
    assert state_of(job_a) == "completed"
    assert (state_of(old.job_id), row(new.job_id)["lease_id"]) == ("running", new.lease_id)


def test_a_second_ack_by_the_same_attempt_does_not_land():
    job_id, claimed = _running()
    assert store.job_complete_many([Completion(claimed.ref, "first")]) == {job_id}
    before = row(job_id)
    assert store.job_complete_many([Completion(claimed.ref, "second")]) == set()
    assert row(job_id) == before


@pytest.mark.parametrize("write", sorted(WRITES))
def test_operator_cancel_stops_the_holder(write: str):
    job_id, claimed = _running()
    assert store.job_cancel(job_id) is True
    before = row(job_id)
    assert WRITES[write](claimed.ref) is False
    assert row(job_id) == before
    assert before["state"] == "cancelled"


def test_operator_cancel_is_reported_by_renewal_and_flips_ctx_cancelled():
    job_id, claimed = _running()
    ctx = JobContext(claimed)
    ctx.set_progress(1, 3)
    assert store.job_cancel(job_id) is True
    assert store.job_renew_leases([claimed.ref], lease_ttl=LONG) == {job_id}
    assert ctx.cancelled is False
    with pytest.raises(LeaseLostError):
        ctx.set_progress(2, 3)
    assert ctx.cancelled is True
    assert row(job_id)["progress"] == {"current": 1, "total": 3, "message": ""}


ODD_IDS = ["a b", "x,y", '{"q"}', "back\\slash", "ünï-ß", "NULL", "tab\u00a0nbsp", "(1,2)"]


def test_batch_writes_match_ids_whatever_characters_they_hold():
    """Ids go to the server joined by a separator no id may hold (``kernel.names`` refuses
    control characters); spaces, commas, quotes, braces, backslashes and ``NULL`` are ids
    like any other."""
    queue = fresh_queue()
    for job_id in ODD_IDS:
        store.job_insert_many([envelope(id=job_id, queue=queue, payload=unique_payload())])
    claimed = store.job_claim(worker_id=WORKER, limit=20, lease_ttl=LONG, queues=[queue])
    refs = [c.ref for c in claimed]
    assert sorted(r.job_id for r in refs) == sorted(ODD_IDS)
    assert store.job_renew_leases(refs, lease_ttl=LONG) == set()
    stale = refs[0]._replace(fence=refs[0].fence + 1)
    done = store.job_complete_many(
        [Completion(stale)] + [Completion(r, r.job_id) for r in refs[1:]]
    )
    assert done == {r.job_id for r in refs[1:]}
    assert {r.job_id: state_of(r.job_id) for r in refs} == {
        r.job_id: ("running" if r is refs[0] else "completed") for r in refs
    }
    assert all(row(r.job_id)["result"] == r.job_id for r in refs[1:])


def test_a_worker_id_with_control_characters_leaves_them_out_of_its_leases():
    job_id = enqueue_job()
    queue = row(job_id)["queue"]
    [claimed] = store.job_claim(worker_id="host\x1f\n:1", limit=1, lease_ttl=LONG, queues=[queue])
    assert claimed.ref.lease_id.startswith("host:1:")
    assert store.job_complete_many([Completion(claimed.ref)]) == {job_id}

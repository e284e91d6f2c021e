"""Eviction keeps pace with completion: one pass clears a backlog larger than a batch,
within its time budget, and deletes exactly what retention allows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headgate_django import store
from headgate_django.kernel.states import State
from headgate_django.models import DutyLease, Job
from headgate_django.store.fenced import Completion
from headgate_django.worker.duties import DutyRunner, default_duties
from tests.conformance.helpers import envelope, expire_lease, fresh_queue, job_in_state, state_of

pytestmark = pytest.mark.django_db

BLINK_RETENTION = timedelta(milliseconds=1)
BATCH = 20


def completed_backlog(n: int, retention: timedelta = BLINK_RETENTION) -> set[str]:
    """``n`` jobs completed through the store, with ``retention``."""
    queue = fresh_queue()
    ids = store.job_insert_many([envelope(queue=queue, retention=retention) for _ in range(n)])
    claimed = store.job_claim(
        worker_id="evict", limit=n, lease_ttl=timedelta(minutes=5), queues=[queue]
    )
    done = store.job_complete_many([Completion(c.ref, None) for c in claimed])
    assert done == set(ids)
    return done


def test_one_pass_clears_a_backlog_of_several_batches_and_keeps_what_retention_keeps():
    expired = completed_backlog(3 * BATCH + 7)
    archived = job_in_state(State.ARCHIVED, retention=BLINK_RETENTION)[0]
    retained = completed_backlog(5, retention=timedelta(days=1))
    quarantined = job_in_state(State.QUARANTINED, retention=BLINK_RETENTION)[0]
    live = {
        state: job_in_state(state, retention=BLINK_RETENTION)[0]
        for state in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE)
    }
    running = job_in_state(State.RUNNING, retention=BLINK_RETENTION)[0]
    expire_lease()  # let the store clock pass the one-millisecond retention
    assert store.job_eviction_backlog().n == len(expired) + 1

    report = store.job_evict_pass(batch=BATCH, budget=60.0)

    assert report.evicted == {"completed": len(expired), "archived": 1}
    assert report.batches == 4  # three full batches and the remainder
    assert report.more is False
    assert not Job.objects.filter(pk__in=[*expired, archived]).exists()
    assert set(Job.objects.filter(pk__in=retained).values_list("pk", flat=True)) == retained
    assert state_of(quarantined) == "quarantined"
    assert {s: state_of(i) for s, i in live.items()} == {s: s.value for s in live}
    assert state_of(running) == "running"
    assert store.job_eviction_backlog().n == 0


def test_a_pass_out_of_budget_stops_after_a_full_batch_and_says_more_remain():
    completed_backlog(2 * BATCH + 1)
    expire_lease()
    report = store.job_evict_pass(batch=BATCH, budget=0.0)
    assert (report.rows, report.batches, report.more) == (BATCH, 1, True)
    assert store.job_eviction_backlog().n == BATCH + 1


def test_the_evict_duty_runs_again_on_the_next_tick_while_a_backlog_remains(settings):
    settings.HEADGATE = {"EVICT_BATCH": BATCH, "EVICT_BUDGET": timedelta(0)}
    completed_backlog(2 * BATCH + 1)
    expire_lease()
    runner = DutyRunner("evicter", [d for d in default_duties() if d.name == "evict"])
    runner.tick()
    assert store.job_eviction_backlog().n == BATCH + 1
    assert DutyLease.objects.get(pk="evict").last_result["more"] is True
    runner.tick()  # due at once, not a whole interval later
    runner.tick()
    assert store.job_eviction_backlog().n == 0
    assert DutyLease.objects.get(pk="evict").last_result["more"] is False


def test_a_pass_yields_to_waiting_jobs_between_batches_and_not_when_none_waits():
    completed_backlog(2 * BATCH + 1)
    expire_lease()
    alone = store.job_evict_pass(batch=BATCH, budget=60.0)
    assert (alone.rows, alone.paused) == (2 * BATCH + 1, 0.0)

    completed_backlog(2 * BATCH + 1)
    waiting = job_in_state(State.AVAILABLE)[0]
    expire_lease()
    beside = store.job_evict_pass(batch=BATCH, budget=60.0)
    assert beside.rows == 2 * BATCH + 1
    # Two full batches, each followed by a pause of (1 - share) / share of its own time.
    assert beside.paused > 0
    assert beside.paused <= beside.seconds * (1 - 0.1) + 0.05
    assert state_of(waiting) == "available"


def test_a_busy_share_of_one_never_pauses_and_the_setting_is_the_default(settings):
    completed_backlog(2 * BATCH + 1)
    job_in_state(State.AVAILABLE)
    expire_lease()
    flat_out = store.job_evict_pass(batch=BATCH, budget=60.0, busy_share=1)
    assert (flat_out.rows, flat_out.paused) == (2 * BATCH + 1, 0.0)

    settings.HEADGATE = {"EVICT_BUSY_SHARE": 1}
    completed_backlog(2 * BATCH + 1)
    expire_lease()
    assert store.job_evict_pass(batch=BATCH, budget=60.0).paused == 0.0

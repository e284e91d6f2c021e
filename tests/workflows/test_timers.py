"""Timers: a relative timer fires at its dependencies' store-stamped completion + delay,
whatever the coordinator's polling latency or the worker's clock; an absolute timer fires
at its instant through the ordinary promoter."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from headgate_django import DefinitionError, enqueue, store, testing
from headgate_django.store.workflows import from_ms
from headgate_django.workflows import Workflow, inspect_workflow, workflow_events
from tests.app import tasks
from tests.workflows.helpers import checkpoint, coordinator, job, ms, run, runs

WORKFLOW_QUEUE = ["headgate-workflow"]


def skew_worker_clock(monkeypatch, delta: timedelta) -> None:
    """Every clock a worker process could read in Python is off by ``delta``."""
    real_time, real_now = time.time, timezone.now
    monkeypatch.setattr(time, "time", lambda: real_time() + delta.total_seconds())
    monkeypatch.setattr(timezone, "now", lambda: real_now() + delta)


def wait_for_store_time(instant_ms: int) -> None:
    while ms(store.db_now()) < instant_ms:
        time.sleep(0.02)


@pytest.mark.django_db
@override_settings(HEADGATE={"COORDINATOR_POLL": timedelta(seconds=5)})
@pytest.mark.parametrize("skew", [timedelta(hours=2), -timedelta(hours=2)], ids=["ahead", "behind"])
def test_relative_timer_is_anchored_to_the_dependencys_store_completion(monkeypatch, skew):
    skew_worker_clock(monkeypatch, skew)
    enqueue(
        Workflow("follow-up:42")
        .add("prepare", tasks.echo.envelope(), [])
        .add_timer_after("cooldown", timedelta(minutes=30), ["prepare"])
        .add("notify", tasks.record_run.envelope(label="notify"), ["cooldown"])
        .prepare()
    )
    testing.run_one(queues=WORKFLOW_QUEUE)  # promotes prepare, then polls every 5 s
    assert testing.run_one(queues=["default"]) == ("follow-up:42:prepare", "completed")
    time.sleep(0.3)  # the coordinator ticks late: polling latency must not move the deadline
    testing.run_one(queues=WORKFLOW_QUEUE)

    finalized = job("follow-up:42:prepare").finalized_at
    timer = job("follow-up:42:cooldown")
    assert timer.state == "scheduled"
    assert ms(timer.scheduled_at) == ms(finalized) + 30 * 60 * 1000
    assert checkpoint("follow-up:42").completed["prepare"] == ms(finalized)
    assert ms(store.db_now()) - ms(finalized) >= 300  # the tick really was late
    scheduled = [e for e in workflow_events("follow-up:42") if e["event"] == "timer_scheduled"]
    assert [(e["node"], e["fire_at_ms"]) for e in scheduled] == [
        ("cooldown", ms(finalized) + 30 * 60 * 1000)
    ]

    testing.run_jobs()
    assert job("follow-up:42:cooldown").state == "scheduled"  # not due for 30 minutes
    assert runs("follow-up:42:notify") == []
    run()  # treat the timer as due
    assert coordinator("follow-up:42").state == "completed"
    assert [r.label for r in runs("follow-up:42:notify")] == ["notify"]


@pytest.mark.django_db
def test_relative_timer_uses_the_latest_dependency_and_fires_at_anchor_plus_delay():
    enqueue(
        Workflow("later")
        .add("early", tasks.echo.envelope(value=1), [])
        .add("late", tasks.snooze_once.envelope(seconds=0.05), [])
        # Long enough that a loaded machine cannot run past it before the asserts below.
        .add_timer_after("wait", timedelta(seconds=3), ["early", "late"])
        .add("after", tasks.echo.envelope(value=2), ["wait"])
        .prepare()
    )
    testing.run_jobs()  # early completes; late snoozes 50 ms
    time.sleep(0.1)
    testing.run_jobs()  # late completes; the timer is scheduled 3 s after it
    early, late = job("later:early"), job("later:late")
    assert late.finalized_at > early.finalized_at
    fire_at = ms(late.finalized_at) + 3000
    assert ms(job("later:wait").scheduled_at) == fire_at
    assert job("later:wait").state == "scheduled"
    assert job("later:after").state == "pending"

    wait_for_store_time(fire_at)
    testing.run_jobs()  # the ordinary promoter makes it due: no test shortcut
    assert ms(job("later:wait").finalized_at) >= fire_at
    assert coordinator("later").state == "completed"
    assert [e["event"] for e in workflow_events("later")].count("timer_fired") == 1


@pytest.mark.django_db
def test_absolute_timer_fires_at_its_instant():
    release_at_ms = ms(store.db_now()) + 1000
    enqueue(
        Workflow("release:42")
        .add("prepare", tasks.echo.envelope(), [])
        .add_timer_at("release-window", release_at_ms, ["prepare"])
        .add("publish", tasks.record_run.envelope(label="publish"), ["release-window"])
        .prepare()
    )
    assert job("release:42:release-window").scheduled_at == from_ms(release_at_ms)

    testing.run_jobs()
    if ms(store.db_now()) < release_at_ms:  # (unless this machine took a whole second)
        assert job("release:42:release-window").state == "scheduled"  # not due yet
        assert runs("release:42:publish") == []
    wait_for_store_time(release_at_ms)
    testing.run_jobs()
    assert ms(job("release:42:release-window").finalized_at) >= release_at_ms
    assert coordinator("release:42").state == "completed"
    assert inspect_workflow("release:42").node("release-window").state == "completed"


@pytest.mark.django_db
def test_an_absolute_timer_that_fires_early_is_buffered_until_its_dependencies_complete():
    past = ms(store.db_now()) - 60_000
    enqueue(
        Workflow("buffered")
        .add("prepare", tasks.snooze_once.envelope(seconds=3600), [])
        .add_timer_at("window", past, ["prepare"])
        .add("publish", tasks.record_run.envelope(label="publish"), ["window"])
        .prepare()
    )
    testing.run_jobs()
    assert job("buffered:window").state == "completed"  # it fired at once...
    assert "window" not in checkpoint("buffered").completed  # ...but is not consumed yet
    assert job("buffered:publish").state == "pending"
    run()
    assert coordinator("buffered").state == "completed"
    events = [(e["event"], e.get("node")) for e in workflow_events("buffered")]
    assert events.index(("node_completed", "window")) > events.index(("node_completed", "prepare"))
    assert runs("buffered:publish")[0].id > runs("buffered:prepare")[-1].id


def test_relative_timers_need_a_dependency_and_a_positive_delay():
    with pytest.raises(DefinitionError):
        Workflow("t").add_timer_after("t", timedelta(minutes=1), [])
    with pytest.raises(DefinitionError):
        (
            Workflow("t")
            .add("a", tasks.noop.envelope(), [])
            .add_timer_after("t", timedelta(0), ["a"])
            .prepare()
        )
    with pytest.raises(DefinitionError):
        Workflow("t").add_timer_at("t", -1, []).prepare()


#: 9999-12-31T23:59:59.999Z, the last instant a job's ``scheduled_at`` can hold.
LAST_INSTANT_MS = 253_402_300_799_999


def test_an_absolute_timer_past_the_last_storable_instant_is_refused_at_prepare():
    assert from_ms(LAST_INSTANT_MS).isoformat() == "9999-12-31T23:59:59.999000+00:00"
    Workflow("t").add_timer_at("t", LAST_INSTANT_MS, []).prepare()
    for too_late in (LAST_INSTANT_MS + 1, 2**62, 2**63 - 1):
        with pytest.raises(DefinitionError, match="wake_at_ms"):
            Workflow("t").add_timer_at("t", too_late, []).prepare()


@pytest.mark.django_db
def test_a_relative_timer_beyond_the_last_storable_instant_waits_instead_of_failing_the_tick():
    enqueue(
        Workflow("t:far")
        .add("a", tasks.noop.envelope(), [])
        .add_timer_after("t", timedelta(days=999_999_999), ["a"])
        .add("b", tasks.noop.envelope(), ["t"])
        .prepare()
    )
    testing.run_jobs()  # not include_scheduled: the timer must stay scheduled
    assert coordinator("t:far").state == "scheduled"  # snoozing, not retrying an error
    assert coordinator("t:far").errors == []
    assert job("t:far:t").state == "scheduled"
    assert ms(job("t:far:t").scheduled_at) == LAST_INSTANT_MS
    (scheduled,) = [e for e in workflow_events("t:far") if e["event"] == "timer_scheduled"]
    assert scheduled["fire_at_ms"] == LAST_INSTANT_MS

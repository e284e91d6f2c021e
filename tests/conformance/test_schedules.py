"""Periodic schedules on each database: upsert and phase, one job per tick under replayed
and overlapping passes, on_missed after downtime, targets, events, declared schedules.

A schedule's past is made by moving its ``next_run_at`` back (the test's stand-in for
"no scheduler ran for a while"); every pass then reads the store clock as in production.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connections
from django.test import override_settings

from headgate_django import schedules, store, testing
from headgate_django.context import JobContext
from headgate_django.envelope import Envelope
from headgate_django.exceptions import (
    NotFoundError,
    PayloadTooLargeError,
    QuarantinedError,
    ScheduleError,
)
from headgate_django.kernel.schedule_origin import tick_id
from headgate_django.kernel.schedule_spec import next_tick, parse_spec, previous_ticks
from headgate_django.models import Effect, Job, Quarantine, Schedule, ScheduleEvent
from headgate_django.models import Execution as DurableExecution
from headgate_django.schedules.scheduler import fire_batch, fire_schedule, run_pass
from headgate_django.store import db_now
from headgate_django.store.schedules import (
    EventRow,
    schedule_due,
    schedule_events_record,
    schedule_get,
    schedule_pause_undeclared,
)
from tests.app import tasks
from tests.app.models import Execution
from tests.conformance.helpers import claim, wait_for_lock_wait

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clear_of_the_hour")]

HOUR = timedelta(hours=1)
#: Every due tick counts as missed: on_missed decides all of them.
NO_GRACE = override_settings(HEADGATE={"SCHEDULE_GRACE": timedelta(0)})
#: Every tick of the last day is on time.
LONG_GRACE = override_settings(HEADGATE={"SCHEDULE_GRACE": timedelta(days=1)})


def hourly(name: str = "hourly", **kwargs: object) -> schedules.ScheduleView:
    return schedules.upsert(name, "@every 1h", tasks.periodic.envelope(), **kwargs)  # type: ignore[arg-type]


def rewind(name: str, ticks: int) -> datetime:
    """Make ``name``'s first unfired tick ``ticks`` hours before the current hour's tick."""
    current = previous_ticks(parse_spec("@every 1h"), db_now(), 1)[0]
    first = current - ticks * HOUR
    Schedule.objects.filter(name=name).update(next_run_at=first)
    return current


def tick_jobs(name: str) -> list[str]:
    return sorted(Job.objects.filter(id__startswith=f"sched:{name}:").values_list("id", flat=True))


def outcomes(name: str) -> list[str]:
    return [e.outcome for e in schedules.events(name)]


# -- upsert, phase, bad input ----------------------------------------------------------


def test_upsert_anchors_after_now_and_same_spec_keeps_phase():
    view = hourly()
    now = db_now()
    assert view.next_run_at is not None and now < view.next_run_at <= now + HOUR
    assert view.name == "hourly" and view.spec == "@every 1h" and view.last_enqueued_at is None
    rewind("hourly", 3)
    kept = schedule_get("hourly").next_run_at
    again = hourly(on_missed="backfill")  # same spec: the phase (and the backlog) stay
    assert again.next_run_at == kept and again.on_missed == "backfill"
    changed = schedules.upsert("hourly", "@every 30m", tasks.periodic.envelope())
    assert changed.next_run_at is not None and changed.next_run_at > db_now()


#: A valid cron spec of 286 characters, over the 255 stored: each minute, hour and day
#: listed.
LONG_SPEC = " ".join(",".join(map(str, r)) for r in (range(60), range(24), range(1, 21)))
LONG_SPEC += " * *"


@pytest.mark.parametrize(
    ("spec", "kwargs"),
    [
        ("61 * * * *", {}),
        ("0 3 * * *", {"tz": "Mars/Olympus_Mons"}),
        ("@every 0s", {}),
        ("@every 1h", {"backfill_limit": -1}),
        ("@every 1h", {"backfill_limit": 2**31}),  # past the column
        ("@every 1h", {"on_missed": "sometimes"}),
        (LONG_SPEC, {}),  # past the column
    ],
)
def test_bad_input_is_refused_and_writes_nothing(spec, kwargs):
    with pytest.raises(ScheduleError):
        schedules.upsert("bad", spec, tasks.periodic.envelope(), **kwargs)
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    "target",
    [
        schedules.workflow("no-such-factory"),
        schedules.durable("no-such-workflow", "1"),
        Envelope(kind="test.periodic", id="fixed-id"),
        Envelope(kind="test.periodic", deadline=timedelta(minutes=1)),
        Envelope(kind="test.periodic", unique_window=timedelta(minutes=1)),
        "test.periodic",
    ],
)
def test_bad_targets_are_refused(target):
    with pytest.raises(ScheduleError):
        schedules.upsert("bad", "@hourly", target)
    with pytest.raises(ScheduleError):
        schedules.upsert("bad name!", "@hourly", tasks.periodic.envelope())
    assert not Schedule.objects.exists()


@override_settings(HEADGATE={"MAX_PAYLOAD_BYTES": 1000})
@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            tasks.echo.envelope(value="x" * 1000),
            "the payload (args and kwargs) of task target 'test.echo' is 1033 bytes",
        ),
        (
            tasks.echo.envelope("x" * 1000),
            "the payload (args and kwargs) of task target 'test.echo' is 1025 bytes",
        ),
        (
            schedules.durable("test-scheduled", "1", "x" * 999),
            "the input of durable target 'test-scheduled' is 1001 bytes",
        ),
    ],
)
def test_a_target_over_the_payload_limit_is_refused_and_writes_nothing(target, message):
    with pytest.raises(PayloadTooLargeError, match=re.escape(message)) as info:
        schedules.upsert("big", "@hourly", target)
    assert info.value.details["limit"] == 1000
    assert not Schedule.objects.exists()


def test_a_declared_target_over_the_payload_limit_writes_nothing():
    declared = {
        "good": {"task": "test.periodic", "spec": "@hourly"},
        "big": {"task": "test.echo", "spec": "@hourly", "kwargs": {"value": "x" * 1000}},
    }
    with (
        override_settings(HEADGATE={"MAX_PAYLOAD_BYTES": 1000, "SCHEDULES": declared}),
        pytest.raises(PayloadTooLargeError, match=r"task target 'test\.echo' is 1033 bytes"),
    ):
        schedules.sync_declared()
    assert not Schedule.objects.exists()


def test_names_differing_only_by_case_never_touch_each_other():
    """Two names that differ only by case are two schedules, or (under MySQL/MariaDB's
    case-insensitive collations, where the database cannot tell them apart) the second is
    refused with a clear error: never a silent replacement of the first."""
    first = schedules.upsert("Nightly", "@every 1h", tasks.periodic.envelope(label="first"))
    try:
        schedules.upsert("nightly", "@every 2h", tasks.periodic.envelope(label="second"))
    except ScheduleError as exc:
        assert "'nightly'" in str(exc) and "'Nightly'" in str(exc) and "case" in str(exc)
        with pytest.raises(NotFoundError, match="no schedule named 'nightly'"):
            schedules.get("nightly")
        for operate in (schedules.pause, schedules.delete, schedules.run_now):
            with pytest.raises(NotFoundError, match="no schedule named 'nightly'"):
                operate("nightly")
    else:
        assert schedules.get("nightly").spec == "@every 2h"
        schedules.pause("nightly")
    kept = schedules.get("Nightly")
    assert (kept.name, kept.spec, kept.paused) == ("Nightly", "@every 1h", False)
    assert kept.target == first.target and kept.next_run_at == first.next_run_at
    assert not Job.objects.filter(id__startswith="sched:").exists()


# -- one job per tick -----------------------------------------------------------------


@LONG_GRACE
def test_a_due_tick_is_enqueued_once_and_the_handler_sees_its_origin():
    hourly()
    current = rewind("hourly", 0)
    assert run_pass() == {"enqueued": 1}
    assert run_pass() == {}  # nothing due any more
    assert tick_jobs("hourly") == [tick_id("hourly", current)]
    view = schedules.get("hourly")
    assert view.next_run_at == current + HOUR and view.last_enqueued_at is not None
    testing.run_jobs()
    assert [e.label for e in Execution.objects.all()] == [f"hourly@{int(current.timestamp())}"]
    assert outcomes("hourly") == ["enqueued"]


@LONG_GRACE
def test_a_pass_replayed_from_a_stale_read_is_deduplicated():
    hourly()
    rewind("hourly", 2)
    now, (stale,) = schedule_due(limit=10)
    first = fire_schedule(stale, now)
    second = fire_schedule(stale, now)  # a second holder that read the same row
    assert first == {"enqueued": 3} and second == {"deduplicated": 3}
    assert len(tick_jobs("hourly")) == 3
    assert outcomes("hourly") == ["deduplicated"] * 3 + ["enqueued"] * 3


@LONG_GRACE
def test_a_batch_fires_the_schedules_it_won_and_dedups_the_one_another_pass_moved():
    """One pass's batch, read before a second pass moved one of its schedules: that one
    records ``deduplicated``, the others fire, all in the batch's one transaction."""
    for name in ("a", "b", "c"):
        hourly(name)
    current = rewind("a", 1)
    Schedule.objects.filter(name__in=["b", "c"]).update(next_run_at=current - HOUR)
    now, due = schedule_due(limit=10)
    stale = sorted(due, key=lambda row: row.name)  # all three due at once: ties unordered
    assert [row.name for row in stale] == ["a", "b", "c"]
    assert fire_schedule(stale[1], now) == {"enqueued": 2}  # the other pass, on b only
    assert fire_batch(stale, now) == {"enqueued": 4, "deduplicated": 2}
    for name in ("a", "b", "c"):
        assert tick_jobs(name) == sorted(tick_id(name, t) for t in (current - HOUR, current))
        assert schedule_get(name).next_run_at == current + HOUR
    assert outcomes("b") == ["deduplicated"] * 2 + ["enqueued"] * 2
    assert outcomes("a") == outcomes("c") == ["enqueued"] * 2


#: Why a pass's tick was lost to an operator's edit undone before its commit.
RESTORED = "schedule paused or changed, then restored, before it fired"
#: Why a pass's tick was lost to a delete and a new schedule under the same name.
RECREATED = "schedule deleted and re-created before it fired"


def deleted_and_recreated() -> None:
    schedules.delete("hourly")
    hourly()


def no_longer_declared_and_resumed() -> None:
    """A worker's settings sync pauses the schedule, gone from them; an operator resumes it."""
    Schedule.objects.filter(name="hourly").update(declared=True)
    assert schedule_pause_undeclared([]) == ["hourly"]
    schedules.resume("hourly")


@LONG_GRACE
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda: schedules.delete("hourly"), "schedule deleted before it fired"),
        (lambda: schedules.pause("hourly"), "schedule paused before it fired"),
        (
            lambda: (schedules.pause("hourly"), schedules.resume("hourly")),
            RESTORED,
        ),
        (lambda: (hourly(paused=True), hourly()), RESTORED),  # the same, by upsert
        (no_longer_declared_and_resumed, RESTORED),
        (  # the spec changed and changed back: re-anchored after now, as by another pass
            lambda: (
                schedules.upsert("hourly", "@every 30m", tasks.periodic.envelope()),
                hourly(),
            ),
            RESTORED,
        ),
        (  # the same with a zone
            lambda: (
                schedules.upsert("hourly", "@hourly", tasks.periodic.envelope(), tz="Asia/Tokyo"),
                hourly(),
            ),
            RESTORED,
        ),
        (deleted_and_recreated, RECREATED),
        (  # with another target: the new schedule's, not a change of the old one
            lambda: (
                schedules.delete("hourly"),
                schedules.upsert("hourly", "@every 1h", tasks.periodic.envelope(label="new")),
            ),
            RECREATED,
        ),
        (lambda: None, "fired by another pass"),
        (hourly, "fired by another pass"),  # upserted as it is: not an edit
        (
            lambda: schedules.upsert("hourly", "@every 30m", tasks.periodic.envelope()),
            "schedule changed before it fired",
        ),
    ],
)
def test_a_tick_a_pass_lost_says_why(change, reason):
    """A pass reads without locks; what happened to a schedule between its read and its
    commit is the reason its tick did not fire, not always "fired by another pass"."""
    hourly()
    current = rewind("hourly", 0)
    now, due = schedule_due(limit=10)
    change()
    if reason == "fired by another pass":
        assert fire_batch(due, now) == {"enqueued": 1}
    outcome = "deduplicated" if reason == "fired by another pass" else "skipped"
    assert fire_batch(due, now) == {outcome: 1}
    (event,) = [e for e in schedules.events("hourly") if e.outcome == outcome]
    assert (event.tick_at, event.reason) == (current, reason)
    assert len(tick_jobs("hourly")) == (outcome == "deduplicated")


@LONG_GRACE
def test_a_schedule_recreated_after_edits_is_not_said_to_be_restored(caplog):
    """The new row's edit count starts again: compared with the old row's, it read as an
    edit undone, and with an equal one as another pass's firing. Only the row's identity
    tells a schedule re-created under its name from the one the pass read."""
    caplog.set_level("INFO", logger="headgate_django.schedules")
    hourly()
    schedules.pause("hourly")
    schedules.resume("hourly")
    current = rewind("hourly", 0)
    now, due = schedule_due(limit=10)
    deleted_and_recreated()
    assert fire_batch(due, now) == {"skipped": 1}
    (event,) = [e for e in schedules.events("hourly") if e.outcome == "skipped"]
    assert (event.tick_at, event.reason) == (current, RECREATED)
    assert tick_jobs("hourly") == []
    assert f"schedule hourly: this pass's ticks for it did not fire: {RECREATED}" in caplog.messages


@override_settings(HEADGATE={"SCHEDULE_LOOKAHEAD": 2 * HOUR})
def test_a_schedule_recreated_on_the_tick_a_pass_read_fires_it_as_its_own():
    """Re-created with the same spec before its next tick, the new schedule's next run is
    the very tick the pass read, with the same definition: nothing but the row's identity
    says it is not the schedule the pass planned for. The pass's ticks are the old
    schedule's, lost with it; the new one fires them in its own pass, once."""
    hourly()
    now, due = schedule_due(limit=10, lookahead=2 * HOUR)
    (row,) = due
    deleted_and_recreated()
    assert schedule_get("hourly").next_run_at == row.next_run_at
    assert fire_batch(due, now) == {"skipped": 2}
    assert tick_jobs("hourly") == []
    assert {e.reason for e in schedules.events("hourly")} == {RECREATED}
    assert run_pass() == {"enqueued": 2}
    assert tick_jobs("hourly") == [tick_id("hourly", row.next_run_at + n * HOUR) for n in (0, 1)]


@LONG_GRACE
def test_a_refused_job_fails_its_tick_alone_in_a_batch():
    """The batch's jobs go in with one insert; when the store refuses it (a quarantined
    payload), each tick is tried alone and only the refused one fails."""
    poison = tasks.periodic.envelope(label="poison")
    Quarantine.objects.create(
        fingerprint=poison.fingerprint, kind=poison.kind, quarantined_at=db_now()
    )
    hourly("good")
    schedules.upsert("bad", "@every 1h", poison)
    current = rewind("good", 0)
    rewind("bad", 0)
    assert run_pass() == {"enqueued": 1, "failed": 1}
    assert tick_jobs("good") == [tick_id("good", current)] and tick_jobs("bad") == []
    (event,) = schedules.events("bad")
    assert event.outcome == "failed" and event.reason.startswith("QuarantinedError")
    assert schedule_get("bad").next_run_at == current + HOUR  # it keeps ticking


def test_the_scheduler_wakes_when_the_next_tick_is_due():
    """The duty runs again at the earliest ``next_run_at`` when that is sooner than its
    interval, and at its interval when nothing is due or what is due did not fire."""
    from headgate_django.schedules.scheduler import wake_in
    from headgate_django.worker.duties import Duty, DutyRunner

    assert wake_in({}) is None  # no schedule at all
    schedules.upsert("soon", "@every 1h", tasks.periodic.envelope())
    due_in = wake_in({})
    assert due_in is not None and 0 < due_in <= 3600
    rewind("soon", 0)
    assert wake_in({}) is None  # due, yet the pass just made fired nothing: no spin
    assert wake_in({"enqueued": 1}) == 0.0
    runner = DutyRunner("t-holder", [Duty("t-wake", 60.0, dict, wake=lambda result: 0.25)])
    runner.tick()
    (duty,) = runner.duties
    assert duty.last + duty.interval - time.monotonic() <= 0.25  # due again in 0.25 s


def test_a_schedule_that_cannot_be_planned_is_parked_and_does_not_make_the_scheduler_spin():
    """A stored spec this version refuses (written by hand, or accepted by an older
    cronsim) is parked: it leaves the due scan, so the duty waits its interval, rather
    than passing again at once, and logging the same error, on every heartbeat."""
    from headgate_django.schedules.scheduler import wake_in

    hourly()
    rewind("hourly", 0)
    Schedule.objects.filter(name="hourly").update(spec="61 * * * *")
    result = run_pass()
    assert result == {"parked": 1}
    assert wake_in(result) is None
    assert run_pass() == {}


@LONG_GRACE
def test_unplannable_schedules_are_parked_and_do_not_crowd_out_due_ones():
    """SCHEDULE_BATCH unplannable schedules, the most overdue, used to fill every batch
    a pass read, so the due schedules behind them never fired. They are parked (out of
    the due scan, next_run_at null, the reason on the schedule and in an event) until an
    edit or a resume plans them again."""
    for name in ("bad-cron", "bad-zone", "good"):
        hourly(name)
    current = rewind("good", 0)
    Schedule.objects.filter(name="bad-cron").update(spec="61 * * * *")
    Schedule.objects.filter(name="bad-zone").update(spec="0 * * * *", timezone="Mars/Olympus")
    Schedule.objects.filter(name__startswith="bad").update(next_run_at=current - 2 * HOUR)
    with override_settings(HEADGATE={"SCHEDULE_GRACE": timedelta(days=1), "SCHEDULE_BATCH": 2}):
        assert run_pass() == {"parked": 2, "enqueued": 1}
    assert tick_jobs("good") == [tick_id("good", current)]
    whys = {"bad-cron": "malformed cron spec '61 * * * *'", "bad-zone": "unknown time zone"}
    for name, why in whys.items():
        view = schedules.get(name)
        assert view.next_run_at is None and view.plan_error is not None
        assert view.plan_error.startswith(why) and schedules.next_runs(name) == []
        (event,) = schedules.events(name)
        assert (event.outcome, event.tick_at) == ("parked", current - 2 * HOUR)
        assert event.reason.startswith(f"cannot be planned: {why}")
    assert run_pass() == {}  # parked: nothing is due
    with pytest.raises(ScheduleError, match="unknown time zone"):
        schedules.resume("bad-zone")  # still unplannable: stays parked
    assert schedules.get("bad-zone").plan_error is not None
    Schedule.objects.filter(name="bad-zone").update(timezone="Europe/Berlin")  # tz data back
    resumed = schedules.resume("bad-zone")
    assert resumed.plan_error is None and resumed.next_run_at is not None
    edited = hourly("bad-cron")  # the same text as before the breakage: an edit all the same
    assert edited.plan_error is None and edited.next_run_at is not None
    assert Schedule.objects.filter(plan_error="").count() == 3


def test_other_jobs_have_no_origin():
    tasks.periodic.enqueue()
    testing.run_jobs()
    assert [e.label for e in Execution.objects.all()] == ["none"]


@pytest.mark.django_db(transaction=True)
def test_two_upserts_creating_one_new_name_at_once_both_succeed():
    """Two workers starting together sync a newly declared schedule (or two clients PUT
    one name): the second insert of the name waits for the first and then hit its unique
    index, an IntegrityError; it replaces the first one's schedule instead, as if it had
    come second."""
    from django.db import transaction

    errors: list[BaseException] = []

    def second() -> None:
        try:
            schedules.upsert("fresh", "@every 2h", tasks.periodic.envelope(label="second"))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=second)
    with transaction.atomic():
        schedules.upsert("fresh", "@every 1h", tasks.periodic.envelope(label="first"))
        thread.start()
        if connections["default"].vendor == "sqlite":
            time.sleep(0.5)  # the second one's transaction waits for the write lock
        else:
            wait_for_lock_wait()  # its insert waits on the first one's new name
    thread.join(timeout=60)
    assert not thread.is_alive() and errors == []
    assert schedules.get("fresh").spec == "@every 2h"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operate", ["pause", "upsert", "delete"])
def test_an_operator_waiting_on_a_schedule_a_pass_holds_does_not_deadlock(monkeypatch, operate):
    """A pass that has locked its batch, and an operator's pause, upsert or delete of one
    of those schedules waiting on that lock, both complete. On MariaDB the pass used to
    lock a large batch's rows through the primary key (a table scan) and then move them
    by name, through the name index the waiting operator already held: InnoDB's deadlock
    (1213) surfaced from ``schedules.pause`` or ``upsert`` as a raw OperationalError.

    The interleaving is made exact by letting the operator start once the pass holds its
    locks (the store's own SQL runs unchanged)."""
    import headgate_django.store.schedules as store_schedules

    for n in range(40):
        hourly(f"batch-{n:02d}")
    for n in range(0, 40, 2):
        rewind(f"batch-{n:02d}", 1)
    # A schedule of its own phase: the pass moves it with an UPDATE of its own, naming it
    # alone (the batch's shared one names twenty).
    target = "half-hourly"
    schedules.upsert(target, "@every 30m", tasks.periodic.envelope())
    # Its current half-hour's tick, exactly one due whenever the test runs (a minute ago
    # was two ticks in the first minute after :00 or :30).
    current = previous_ticks(parse_spec("@every 30m"), db_now(), 1)[0]
    Schedule.objects.filter(name=target).update(next_run_at=current)
    errors: list[BaseException] = []

    def operator() -> None:
        try:
            if operate == "pause":
                schedules.pause(target)
            elif operate == "upsert":
                schedules.upsert(target, "@every 2h", tasks.periodic.envelope(label="new"))
            else:
                schedules.delete(target)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=operator)
    real_lock = store_schedules._lock_batch

    def lock_then_let_the_operator_in(*args, **kwargs):
        locked = real_lock(*args, **kwargs)
        thread.start()
        if connections["default"].vendor == "sqlite":
            time.sleep(0.5)  # the operator's transaction now waits for the write lock
        else:
            wait_for_lock_wait()  # the operator's statement waits on the pass's locks
        return locked

    monkeypatch.setattr(store_schedules, "_lock_batch", lock_then_let_the_operator_in)
    with LONG_GRACE:
        counts = run_pass()
    thread.join(timeout=60)
    assert not thread.is_alive() and errors == []
    assert counts.get("enqueued") == 41  # two ticks of each rewound hourly, one of the target
    assert Job.objects.filter(id__startswith="sched:").count() == 41
    if operate == "pause":
        assert schedules.get(target).paused
    elif operate == "upsert":
        assert schedules.get(target).spec == "@every 2h"
    else:
        assert not Schedule.objects.filter(name=target).exists()


@pytest.mark.django_db(transaction=True)
def test_two_writers_trimming_neighbouring_schedules_events_do_not_deadlock(monkeypatch):
    """Two transactions that each recorded events and then trim a schedule's oldest ones
    both complete. On MariaDB the trim was a range delete on the (schedule, id) index,
    which ends on the next schedule's newest entry: a pass that had just written that
    entry, and an operator's trim waiting on it, then waited on each other (deadlock 1213
    from ``schedules.pause``, ``upsert`` or ``run_now``).

    The interleaving is made exact by letting the second writer start once the first has
    written its events (the store's own SQL runs unchanged)."""
    import headgate_django.store.schedules as store_schedules

    at = db_now()
    # 119 events each, one below the trim, among other schedules' (so that the trim reads
    # the events' index, as it does in a store of any size).
    names = [*(f"trim-{n:02d}" for n in range(30)), "trim-a", "trim-b"]
    old = [
        EventRow(name, at - timedelta(minutes=n), "enqueued")
        for name in names
        for n in range(1, 120)
    ]
    for chunk in range(0, len(old), 1000):
        schedule_events_record(old[chunk : chunk + 1000])
    errors: list[BaseException] = []

    def second() -> None:
        try:
            schedule_events_record([EventRow("trim-a", at, "skipped", "second")])
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=second)
    real_insert = store_schedules._insert_events

    def insert_then_let_the_second_in(*args, **kwargs):
        real_insert(*args, **kwargs)
        if threading.current_thread() is not thread and not thread.is_alive():
            thread.start()
            time.sleep(0.5)  # the second writer's trim now waits on our new rows

    monkeypatch.setattr(store_schedules, "_insert_events", insert_then_let_the_second_in)
    schedule_events_record(
        [EventRow("trim-b", at, "enqueued", "first"), EventRow("trim-a", at, "enqueued", "first")]
    )
    thread.join(timeout=60)
    assert not thread.is_alive() and errors == []
    for name in ("trim-a", "trim-b"):
        assert len(schedules.events(name)) == 100
        # Each trim kept the newest 100 it saw; the other writer's event may be one more.
        assert 100 <= ScheduleEvent.objects.filter(schedule_name=name).count() <= 101


# -- on_missed after downtime ---------------------------------------------------------


@NO_GRACE
def test_skip_enqueues_none_of_the_missed_ticks():
    hourly(on_missed="skip")
    current = rewind("hourly", 5)
    assert run_pass() == {"skipped": 1}
    assert tick_jobs("hourly") == []
    assert schedule_get("hourly").next_run_at == current + HOUR
    (event,) = schedules.events("hourly")
    assert (event.outcome, event.tick_at, event.reason) == ("skipped", current, "missed (skip)")


@NO_GRACE
def test_run_once_enqueues_exactly_one_catch_up():
    hourly(on_missed="run_once")
    current = rewind("hourly", 5)
    run_pass()
    assert tick_jobs("hourly") == [tick_id("hourly", current)]


@NO_GRACE
def test_backfill_enqueues_the_newest_missed_ticks_up_to_the_limit():
    hourly(on_missed="backfill", backfill_limit=3)
    current = rewind("hourly", 5)
    assert run_pass() == {"enqueued": 3, "skipped": 1}
    assert tick_jobs("hourly") == sorted(tick_id("hourly", current - k * HOUR) for k in range(3))
    assert schedule_get("hourly").next_run_at == current + HOUR


def test_paused_schedules_do_not_fire_and_resume_starts_after_now():
    hourly()
    schedules.pause("hourly")
    rewind("hourly", 3)
    assert run_pass() == {}
    view = schedules.resume("hourly")
    assert view.next_run_at is not None and view.next_run_at > db_now() and not view.paused


@NO_GRACE
def test_unpausing_by_upsert_starts_after_now_and_backfills_nothing_of_the_pause():
    # What the declared schedules' sync does to a schedule paused at runtime: the ticks
    # while it was paused were not missed, as with ``resume``.
    hourly(on_missed="backfill")
    hourly(on_missed="backfill", paused=True)
    rewind("hourly", 3)
    view = hourly(on_missed="backfill")
    assert view.next_run_at is not None and view.next_run_at > db_now() and not view.paused
    assert run_pass() == {} and tick_jobs("hourly") == []


# -- targets ---------------------------------------------------------------------------


@LONG_GRACE
def test_workflow_factory_target_starts_one_workflow_per_tick():
    schedules.upsert("wf", "@every 1h", schedules.workflow("test-nightly-import"))
    current = rewind("wf", 1)
    now, (stale,) = schedule_due(limit=10)
    fire_schedule(stale, now)
    fire_schedule(stale, now)
    workflow_ids = set(Job.objects.exclude(workflow_id=None).values_list("workflow_id", flat=True))
    assert workflow_ids == {tick_id("wf", current), tick_id("wf", current - HOUR)}
    testing.run_jobs(include_scheduled=True)
    labels = sorted(e.label for e in Execution.objects.all())
    assert labels == sorted(f"wf@{int(t.timestamp())}" for t in (current, current - HOUR))


@LONG_GRACE
def test_a_factory_that_raises_fails_its_tick_and_the_schedule_keeps_ticking():
    schedules.upsert("broken", "@every 1h", schedules.workflow("test-broken"))
    current = rewind("broken", 0)
    assert run_pass() == {"failed": 1}
    (event,) = schedules.events("broken")
    assert event.outcome == "failed"
    assert event.reason.startswith("RuntimeError: the report source is down")
    assert schedule_get("broken").next_run_at == current + HOUR
    assert not Job.objects.exists()


@LONG_GRACE
def test_durable_target_starts_one_execution_per_tick():
    schedules.upsert("dur", "@every 1h", schedules.durable("test-scheduled", "1", {"n": 1}))
    current = rewind("dur", 0)
    now, (stale,) = schedule_due(limit=10)
    fire_schedule(stale, now)
    fire_schedule(stale, now)
    assert list(DurableExecution.objects.values_list("id", "business_idempotency_key")) == [
        (tick_id("dur", current), tick_id("dur", current))
    ]


# -- run_now, next_runs, events, delete -------------------------------------------------


def test_run_now_enqueues_without_moving_the_schedule():
    before = hourly().next_run_at
    job_id = schedules.run_now("hourly")
    assert Job.objects.filter(pk=job_id).exists() and job_id != schedules.run_now("hourly")
    assert schedules.get("hourly").next_run_at == before
    assert outcomes("hourly") == ["enqueued", "enqueued"]
    with pytest.raises(NotFoundError):
        schedules.run_now("missing")


def test_run_now_refused_by_the_store_raises_the_refusal_and_records_it():
    poison = tasks.periodic.envelope(label="poison")
    Quarantine.objects.create(
        fingerprint=poison.fingerprint, kind=poison.kind, quarantined_at=db_now()
    )
    schedules.upsert("bad", "@every 1h", poison)
    with pytest.raises(QuarantinedError):
        schedules.run_now("bad")
    (event,) = schedules.events("bad")
    assert event.outcome == "failed" and event.reason.startswith("QuarantinedError: ")
    assert tick_jobs("bad") == []


def test_next_runs_across_dst_in_berlin_and_new_york():
    berlin = ZoneInfo("Europe/Berlin")
    schedules.upsert("b", "CRON_TZ=Europe/Berlin 30 2 * * *", tasks.periodic.envelope())
    first = datetime(2027, 3, 27, 2, 30, tzinfo=berlin).astimezone(UTC)
    Schedule.objects.filter(name="b").update(next_run_at=first)
    assert [t.astimezone(berlin).day for t in schedules.next_runs("b", 3)] == [27, 28, 29]
    autumn = datetime(2027, 10, 30, 2, 30, tzinfo=berlin).astimezone(UTC)
    Schedule.objects.filter(name="b").update(next_run_at=autumn)
    runs = schedules.next_runs("b", 3)
    assert runs[1] == datetime(2027, 10, 31, 0, 30, tzinfo=UTC)  # the first 02:30, once
    assert [t.astimezone(berlin).day for t in runs] == [30, 31, 1]
    schedules.upsert("ny", "30 2 * * *", tasks.periodic.envelope(), tz="America/New_York")
    ny = ZoneInfo("America/New_York")
    Schedule.objects.filter(name="ny").update(
        next_run_at=datetime(2027, 3, 13, 2, 30, tzinfo=ny).astimezone(UTC)
    )
    assert [t.astimezone(ny).day for t in schedules.next_runs("ny", 3)] == [13, 14, 15]
    # 2027-11-07: 01:30 comes in EDT and again in EST; it fires once, at the first.
    schedules.upsert("ny-fall", "30 1 * * *", tasks.periodic.envelope(), tz="America/New_York")
    Schedule.objects.filter(name="ny-fall").update(
        next_run_at=datetime(2027, 11, 6, 1, 30, tzinfo=ny).astimezone(UTC)
    )
    assert schedules.next_runs("ny-fall", 3) == [
        datetime(2027, 11, 6, 5, 30, tzinfo=UTC),
        datetime(2027, 11, 7, 5, 30, tzinfo=UTC),
        datetime(2027, 11, 8, 6, 30, tzinfo=UTC),
    ]


def test_events_keep_the_newest_hundred_and_outlive_the_schedule():
    hourly()
    base = datetime(2027, 1, 1, tzinfo=UTC)
    schedule_events_record(
        [EventRow("hourly", base + k * HOUR, "enqueued", f"e{k}") for k in range(119)]
    )
    kept = schedules.events("hourly")
    assert len(kept) == 100 and kept[0].reason == "e118" and kept[-1].reason == "e19"
    assert len(schedules.events("hourly", limit=500)) == 100  # never the slack's
    assert ScheduleEvent.objects.count() == 119  # within the trim's slack
    schedule_events_record([EventRow("hourly", base, "enqueued", "e119")])
    assert ScheduleEvent.objects.count() == 100
    assert len(schedules.events("hourly", limit=3)) == 3
    schedules.delete("hourly")
    assert len(schedules.events("hourly")) == 100
    assert ScheduleEvent.objects.count() == 100
    with pytest.raises(NotFoundError):
        schedules.get("hourly")
    assert schedules.list_schedules() == []


# -- declared in settings ------------------------------------------------------------


def test_declared_schedules_sync_and_removed_ones_are_paused():
    declared = {
        "nightly": {"task": "tests.app.tasks.periodic", "spec": "0 3 * * *", "kwargs": {}},
        "wf": {"workflow": "test-nightly-import", "spec": "@daily", "tz": "Europe/Berlin"},
    }
    with override_settings(HEADGATE={"SCHEDULES": declared}):
        assert schedules.sync_declared() == {"synced": ["nightly", "wf"], "paused": []}
        phase = schedules.get("nightly").next_run_at
        schedules.sync_declared()
        assert schedules.get("nightly").next_run_at == phase
    with override_settings(HEADGATE={"SCHEDULES": {"wf": declared["wf"]}}):
        assert schedules.sync_declared() == {"synced": ["wf"], "paused": ["nightly"]}
    assert schedules.get("nightly").paused and not schedules.get("nightly").declared


@pytest.mark.parametrize("was_paused", [False, True])
def test_a_schedule_no_longer_declared_and_resumed_stays_resumed_at_the_next_start(
    was_paused: bool,
) -> None:
    """Removed from the settings, a schedule is paused once (if it ran) and is a runtime
    schedule from then on: an operator who resumes it does not find it paused again by
    every later worker start."""
    declared = {"nightly": {"task": "test.periodic", "spec": "@hourly", "paused": was_paused}}
    with override_settings(HEADGATE={"SCHEDULES": declared}):
        schedules.sync_declared()
    with override_settings(HEADGATE={"SCHEDULES": {}}):
        paused = [] if was_paused else ["nightly"]
        assert schedules.sync_declared() == {"synced": [], "paused": paused}
        assert schedules.get("nightly").paused and not schedules.get("nightly").declared
        schedules.resume("nightly")
        assert schedules.sync_declared() == {"synced": [], "paused": []}
    assert not schedules.get("nightly").paused


def test_declared_schedules_with_a_bad_entry_write_nothing():
    declared = {
        "good": {"task": "test.periodic", "spec": "@hourly"},
        "bad": {"task": "tests.app.tasks.no_such_task", "spec": "@hourly"},
    }
    with (
        override_settings(HEADGATE={"SCHEDULES": declared}),
        pytest.raises(ScheduleError, match="no task has the kind or import path"),
    ):
        schedules.sync_declared()
    assert not Schedule.objects.exists()


# -- the lookahead: task ticks written ahead of their instant ----------------------------


def soon(name: str, seconds: float) -> datetime:
    """Make ``name``'s next tick ``seconds`` from the store clock's now (inside the
    default 5 s lookahead when ``seconds`` < 5)."""
    at = db_now() + timedelta(seconds=seconds)
    Schedule.objects.filter(name=name).update(next_run_at=at)
    return at


def test_a_task_tick_inside_the_lookahead_is_written_ahead_scheduled_for_its_instant():
    hourly()
    at = soon("hourly", 2)
    assert run_pass() == {"enqueued": 1}
    (job_id,) = tick_jobs("hourly")
    assert job_id == tick_id("hourly", at)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.scheduled_at) == ("scheduled", at)  # claimable from its tick
    assert schedule_get("hourly").next_run_at == next_tick(parse_spec("@every 1h"), at)
    assert run_pass() == {}  # and only once


def test_without_a_lookahead_or_outside_it_nothing_is_written_early():
    hourly()
    soon("hourly", 2)
    with override_settings(HEADGATE={"SCHEDULE_LOOKAHEAD": timedelta(0)}):
        assert run_pass() == {}
    soon("hourly", 30)
    assert run_pass() == {}
    assert tick_jobs("hourly") == []


def test_workflow_ticks_start_at_their_instant_not_ahead():
    schedules.upsert("wf", "@every 1h", schedules.workflow("test-nightly-import"))
    at = soon("wf", 2)
    assert run_pass() == {}
    assert schedule_get("wf").next_run_at == at


def test_pausing_withdraws_a_tick_written_ahead_and_resuming_writes_it_again():
    hourly()
    at = soon("hourly", 3)
    run_pass()
    assert tick_jobs("hourly") == [tick_id("hourly", at)]
    schedules.pause("hourly")
    assert tick_jobs("hourly") == []  # it never ran: nothing claimable went away
    (event,) = [e for e in schedules.events("hourly") if e.outcome == "skipped"]
    assert (event.tick_at, event.reason) == (at, "withdrawn: schedule paused")
    schedules.resume("hourly")
    soon("hourly", 3)
    run_pass()
    assert len(tick_jobs("hourly")) == 1


@pytest.mark.parametrize("edit", ["pause", "new target", "delete"])
def test_a_tick_written_ahead_that_already_ran_is_not_withdrawn(edit):
    """An operator can promote a tick written ahead; it runs, records a ``ctx.once``
    effect and snoozes, scheduled past now again. It is no longer a tick that waits: an
    edit of the schedule leaves it, with its effect record, as one that had reached its
    instant. Withdrawn, it was deleted without its record, and the new target's job
    under the same id found the record and skipped the effect."""
    hourly()
    at = soon("hourly", 3)
    run_pass()
    (job_id,) = tick_jobs("hourly")
    store.job_promote(job_id)
    ctx = JobContext(claim(job_id))
    ctx.once("charge", lambda: 1)
    store.job_snooze(ctx.lease, delay=HOUR)
    if edit == "pause":
        schedules.pause("hourly")
    elif edit == "new target":
        schedules.upsert("hourly", "@every 1h", tasks.periodic.envelope(label="new"))
        # the next tick stays on the grid (it was the snooze's instant)
        assert schedule_get("hourly").next_run_at == next_tick(parse_spec("@every 1h"), at)
        run_pass()
    else:
        schedules.delete("hourly")
    job = Job.objects.get(pk=job_id)
    assert job.state == "scheduled" and b"new" not in bytes(job.payload)
    assert list(Effect.objects.filter(job_id=job_id).values_list("name", flat=True)) == ["charge"]
    assert at not in [e.tick_at for e in schedules.events("hourly") if e.outcome == "skipped"]


def test_a_schedule_no_longer_declared_is_paused_with_its_tick_written_ahead_withdrawn():
    declared = {"nightly": {"task": "test.periodic", "spec": "@hourly"}}
    with override_settings(HEADGATE={"SCHEDULES": declared}):
        schedules.sync_declared()
    at = soon("nightly", 3)
    run_pass()
    assert tick_jobs("nightly") == [tick_id("nightly", at)]
    with override_settings(HEADGATE={"SCHEDULES": {}}):
        assert schedules.sync_declared() == {"synced": [], "paused": ["nightly"]}
    assert tick_jobs("nightly") == []
    (event,) = [e for e in schedules.events("nightly") if e.outcome == "skipped"]
    assert (event.tick_at, event.reason) == (at, "withdrawn: schedule no longer declared")


def test_a_new_target_replaces_the_ticks_written_ahead_and_delete_withdraws_them():
    hourly()
    at = soon("hourly", 3)
    run_pass()
    schedules.upsert("hourly", "@every 1h", tasks.periodic.envelope(label="new"))
    assert tick_jobs("hourly") == []
    assert schedule_get("hourly").next_run_at == at  # the same tick fires again, as the new target
    run_pass()
    (job_id,) = tick_jobs("hourly")
    assert b"new" in bytes(Job.objects.get(pk=job_id).payload)
    schedules.delete("hourly")
    assert tick_jobs("hourly") == []
    assert schedules.events("hourly")[0].reason == "withdrawn: schedule deleted"


def test_a_pass_that_read_the_old_target_writes_nothing_ahead_after_the_change():
    # A pass reads without locks: a change of target between its read and its commit
    # must not leave the old target's tick written ahead, which the change promised
    # to withdraw.
    hourly()
    at = soon("hourly", 3)
    now, due = schedule_due(limit=10, lookahead=timedelta(seconds=5))
    schedules.upsert("hourly", "@every 1h", tasks.periodic.envelope(label="new"))
    assert fire_batch(due, now) == {"skipped": 1}
    assert tick_jobs("hourly") == []
    run_pass()
    (job_id,) = tick_jobs("hourly")
    assert job_id == tick_id("hourly", at) and b"new" in bytes(Job.objects.get(pk=job_id).payload)


def test_a_tick_that_is_running_or_done_is_never_withdrawn():
    hourly()
    at = soon("hourly", 3)
    run_pass()
    Job.objects.filter(pk=tick_id("hourly", at)).update(state="available")  # promoted
    schedules.pause("hourly")
    assert tick_jobs("hourly") == [tick_id("hourly", at)]


def test_the_scheduler_wakes_a_lookahead_before_a_task_tick():
    from headgate_django.schedules.scheduler import wake_in

    hourly()
    soon("hourly", 8)
    wake = wake_in({"enqueued": 1})
    assert wake is not None and 2 < wake < 3.5  # 8 s away, less the 5 s lookahead

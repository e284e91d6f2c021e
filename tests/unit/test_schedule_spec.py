"""Schedule specs: parsing, ticks across DST changes, and what a pass fires after downtime.

"Now" is passed in (the store clock, mocked here by plain instants), so none of this
needs a database.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from headgate_django.exceptions import DefinitionError, ScheduleError
from headgate_django.kernel import schedule_spec
from headgate_django.kernel.schedule_origin import origin_of, tick_id
from headgate_django.kernel.schedule_spec import (
    MAX_EVERY,
    ScheduleSpec,
    accept_spec,
    next_tick,
    next_ticks,
    parse_spec,
    plan_pass,
    previous_ticks,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold).astimezone(UTC)


# -- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cron", "every", "tz"),
    [
        ("0 3 * * *", "0 3 * * *", None, "UTC"),
        ("*/10 * * * * *", "*/10 * * * * *", None, "UTC"),
        ("CRON_TZ=Europe/Berlin 30 2 * * *", "30 2 * * *", None, "Europe/Berlin"),
        ("@every 30s", None, 30, "UTC"),
        ("@every 1h30m", None, 5400, "UTC"),
        ("@hourly", "0 * * * *", None, "UTC"),
        ("@daily", "0 0 * * *", None, "UTC"),
        ("@weekly", "0 0 * * 0", None, "UTC"),
        ("@monthly", "0 0 1 * *", None, "UTC"),
    ],
)
def test_parse(text: str, cron: str | None, every: int | None, tz: str) -> None:
    spec = parse_spec(text)
    assert (spec.cron, spec.every, spec.tz) == (cron, every, tz)


def test_tz_argument_and_timedelta() -> None:
    assert parse_spec("0 3 * * *", tz="America/New_York").tz == "America/New_York"
    assert parse_spec(timedelta(minutes=15)).every == 900
    assert parse_spec(timedelta(minutes=15)).text == "@every 900s"


@pytest.mark.parametrize(
    ("spec", "tz"),
    [
        ("61 * * * *", None),  # malformed cron
        ("* * *", None),  # too few fields
        ("0 3 * * * * *", None),  # too many fields
        ("0 3 30 2 *", None),  # never fires
        ("0 3 * * *", "Mars/Olympus_Mons"),  # unknown zone
        ("CRON_TZ=Nowhere/Land 0 3 * * *", None),
        ("0 3 * * *", "Europe"),  # a region, not a zone: a directory of the zone files
        ("CRON_TZ=America 0 3 * * *", None),
        ("0 3 * * *", "Europe/" + "x" * 300),  # a file name too long for the system
        ("0 3 * * *", ""),  # no zone is not UTC
        ("CRON_TZ= 0 3 * * *", None),
        ("CRON_TZ=Europe/Berlin 0 3 * * *", "America/New_York"),  # two zones
        ("@every 0s", None),
        ("@every", None),
        ("@every 5x", None),
        ("@every 30s", "Europe/Berlin"),  # intervals are UTC-aligned
        ("@fortnightly", None),
        ("", None),
        (timedelta(0), None),
        (timedelta(milliseconds=1500), None),
        (timedelta(seconds=-5), None),
    ],
)
def test_bad_specs_raise_schedule_error(spec: str | timedelta, tz: str | None) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_spec(spec, tz=tz)
    assert isinstance(info.value, DefinitionError)


@pytest.mark.parametrize(
    "spec",
    [
        "@every 18250d1s",
        "@every 3000000d",  # past year 9999 from the epoch: OverflowError at the first tick
        "@every 999999999d",
        "@every 99999999999999999999s",  # past timedelta's range
        "@every " + "9" * 240 + "s",
        timedelta(days=3_000_000),
    ],
)
def test_an_interval_over_the_maximum_is_refused_naming_it(spec: str | timedelta) -> None:
    with pytest.raises(ScheduleError, match="at most 18250d"):
        parse_spec(spec)
    assert parse_spec("@every 18250d").every == MAX_EVERY.total_seconds() == 18250 * 86400


@pytest.mark.parametrize(
    "spec",
    [
        "@every " + "9" * 5000 + "s",  # past int()'s digits
        ",".join(["0"] * 200) + " * * * *",
        "CRON_TZ=America/Argentina/ComodRivadavia " + ",".join(["0"] * 107) + " * * * *",
    ],
)
def test_a_spec_longer_than_its_column_is_refused(spec: str) -> None:
    with pytest.raises(ScheduleError, match="at most 255 characters"):
        accept_spec(spec)
    assert accept_spec(" " * 300 + "0 3 * * *").text == "0 3 * * *"  # spaces count once
    # A row stored before the bound (SQLite kept any length) is still read, and fires.
    assert parse_spec(",".join(["0"] * 200) + " * * * *").cron is not None


def test_bad_on_missed_and_backfill_limit() -> None:
    spec = parse_spec("@every 1s")
    kw = {"next_run_at": utc(2027, 1, 1), "now": utc(2027, 1, 1), "grace": timedelta(0)}
    with pytest.raises(ScheduleError, match="negative"):
        plan_pass(spec, on_missed="backfill", backfill_limit=-1, cap=10, **kw)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="at most 10,000"):
        plan_pass(spec, on_missed="backfill", backfill_limit=10_001, cap=10, **kw)  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="on_missed"):
        plan_pass(spec, on_missed="always", backfill_limit=1, cap=10, **kw)  # type: ignore[arg-type]


# -- ticks -------------------------------------------------------------------------------


def test_every_is_epoch_aligned_in_utc() -> None:
    spec = parse_spec("@every 15m")
    assert next_ticks(spec, utc(2027, 5, 1, 10, 7, 12), 3) == [
        utc(2027, 5, 1, 10, 15),
        utc(2027, 5, 1, 10, 30),
        utc(2027, 5, 1, 10, 45),
    ]
    # Strictly after: a tick instant is not its own successor.
    assert next_tick(spec, utc(2027, 5, 1, 10, 15)) == utc(2027, 5, 1, 10, 30)
    assert previous_ticks(spec, utc(2027, 5, 1, 10, 15), 2) == [
        utc(2027, 5, 1, 10, 15),
        utc(2027, 5, 1, 10, 0),
    ]


def test_every_ticks_end_where_datetime_does() -> None:
    yearly = parse_spec("@every 365d")
    # A backfill may walk back past year 1: the walk ends there, not in an OverflowError.
    ticks = previous_ticks(yearly, utc(2027, 1, 1), 10_000)
    assert len(ticks) == 2028 and ticks[-1] == utc(1, 4, 23)
    passed = plan_pass(
        yearly,
        next_run_at=utc(2000, 1, 1),
        now=utc(2027, 1, 1),
        grace=timedelta(0),
        on_missed="backfill",
        backfill_limit=10_000,
        cap=100,
    )
    assert passed.fire == tuple(reversed(ticks[:27])) and passed.fire[0] >= utc(2000, 1, 1)
    assert passed.next_run_at == utc(2027, 12, 18)
    # And forward: the last tick before year 10000 is the last one.
    longest = parse_spec("@every 18250d")
    assert next_ticks(longest, utc(9900, 1, 1), 3) == [utc(9914, 9, 22), utc(9964, 9, 9)]
    assert next_tick(longest, utc(9964, 9, 9)) is None


def test_six_field_cron_has_seconds() -> None:
    spec = parse_spec("*/20 * * * * *")
    assert next_ticks(spec, utc(2027, 5, 1, 10, 0, 5), 3) == [
        utc(2027, 5, 1, 10, 0, 20),
        utc(2027, 5, 1, 10, 0, 40),
        utc(2027, 5, 1, 10, 1, 0),
    ]


def test_berlin_spring_forward_fires_a_nonexistent_time_when_the_gap_ends() -> None:
    spec = parse_spec("CRON_TZ=Europe/Berlin 30 2 * * *")
    ticks = next_ticks(spec, local(BERLIN, 2027, 3, 26, 12), 3)
    # 2027-03-28 has no 02:30 in Berlin (02:00 → 03:00): that day fires at 03:00 CEST.
    assert ticks == [
        local(BERLIN, 2027, 3, 27, 2, 30),
        utc(2027, 3, 28, 1, 0),
        local(BERLIN, 2027, 3, 29, 2, 30),
    ]


@pytest.mark.parametrize(
    ("zone", "day", "gap_end"),
    [
        # Clocks jump from 00:00 to 01:00: midnight does not exist that day.
        ("America/Santiago", datetime(2026, 9, 6), utc(2026, 9, 6, 4, 0)),
        ("America/Havana", datetime(2027, 3, 14), utc(2027, 3, 14, 5, 0)),
    ],
)
def test_a_daily_midnight_job_still_runs_on_a_day_that_starts_at_one(
    zone: str, day: datetime, gap_end: datetime
) -> None:
    tz = ZoneInfo(zone)
    spec = parse_spec("0 0 * * *", tz=zone)
    before = local(tz, day.year, day.month, day.day - 1, 12)
    ticks = next_ticks(spec, before, 2)
    assert ticks == [gap_end, local(tz, day.year, day.month, day.day + 1, 0, 0)]
    assert gap_end.astimezone(tz).strftime("%H:%M") == "01:00"  # the gap's first instant
    assert previous_ticks(spec, ticks[-1], 2) == ticks[::-1]


def test_every_wall_time_in_a_gap_fires_once_when_it_ends() -> None:
    spec = parse_spec("*/30 * * * *", tz="Europe/Berlin")
    ticks = next_ticks(spec, local(BERLIN, 2027, 3, 28, 1, 10), 3)
    assert ticks == [
        utc(2027, 3, 28, 0, 30),  # 01:30 CET
        utc(2027, 3, 28, 1, 0),  # 02:00, 02:30 and 03:00 CEST: one tick, at 03:00
        utc(2027, 3, 28, 1, 30),  # 03:30 CEST
    ]
    assert previous_ticks(spec, ticks[-1], 3) == ticks[::-1]
    assert next_tick(spec, utc(2027, 3, 28, 1, 0)) == utc(2027, 3, 28, 1, 30)


def test_berlin_fall_back_fires_the_repeated_time_once() -> None:
    spec = parse_spec("CRON_TZ=Europe/Berlin 30 2 * * *")
    ticks = next_ticks(spec, local(BERLIN, 2027, 10, 30, 12), 3)
    # 02:30 happens twice on 2027-10-31 (CEST, then CET): it fires at the first one only.
    assert ticks == [
        utc(2027, 10, 31, 0, 30),
        local(BERLIN, 2027, 11, 1, 2, 30),
        local(BERLIN, 2027, 11, 2, 2, 30),
    ]
    # From inside the second 02:30 hour, the next tick is the next day's.
    assert next_tick(spec, utc(2027, 10, 31, 1, 15)) == local(BERLIN, 2027, 11, 1, 2, 30)


def test_repeated_hour_fires_each_wall_time_once_for_wildcard_hours() -> None:
    spec = parse_spec("*/30 * * * *", tz="Europe/Berlin")
    ticks = next_ticks(spec, local(BERLIN, 2027, 10, 31, 1, 50), 4)
    assert ticks == [
        utc(2027, 10, 31, 0, 0),  # 02:00 CEST
        utc(2027, 10, 31, 0, 30),  # 02:30 CEST
        utc(2027, 10, 31, 2, 0),  # 03:00 CET: 02:00 and 02:30 CET do not fire again
        utc(2027, 10, 31, 2, 30),
    ]


def test_new_york_both_changes() -> None:
    spec = parse_spec("30 2 * * *", tz="America/New_York")
    # 2027-03-14: 02:00 EST → 03:00 EDT, no 02:30: it fires at 03:00 EDT.
    assert next_ticks(spec, local(NEW_YORK, 2027, 3, 13, 12), 2) == [
        utc(2027, 3, 14, 7, 0),
        local(NEW_YORK, 2027, 3, 15, 2, 30),
    ]
    # 2027-11-07: 01:00–02:00 repeats; "30 1" fires once, at the first (EDT) 01:30.
    spec = parse_spec("30 1 * * *", tz="America/New_York")
    assert next_ticks(spec, local(NEW_YORK, 2027, 11, 6, 12), 2) == [
        utc(2027, 11, 7, 5, 30),
        local(NEW_YORK, 2027, 11, 8, 1, 30),
    ]


def test_backward_walk_matches_forward_across_dst() -> None:
    spec = parse_spec("*/30 * * * *", tz="Europe/Berlin")
    start = utc(2027, 10, 30, 20)
    forward = next_ticks(spec, start, 20)
    assert previous_ticks(spec, forward[-1], 20) == forward[::-1]
    # Inside the second pass of the repeated hour, the first pass's ticks are behind us.
    assert previous_ticks(spec, utc(2027, 10, 31, 1, 15), 2) == [
        utc(2027, 10, 31, 0, 30),
        utc(2027, 10, 31, 0, 0),
    ]


# -- what a pass fires -------------------------------------------------------------------

T0 = utc(2027, 6, 1, 12, 0, 0)


def plan(on_missed: str, limit: int = 10, *, down: int, grace: float = 0.5, cap: int = 100):  # type: ignore[no-untyped-def]
    """A pass for ``@every 1s`` whose last pass fired T0 - 1s, ``down`` ticks ago."""
    return plan_pass(
        parse_spec("@every 1s"),
        next_run_at=T0,
        now=T0 + timedelta(seconds=down, milliseconds=200),
        grace=timedelta(seconds=grace),
        on_missed=on_missed,
        backfill_limit=limit,
        cap=cap,
    )


def test_on_time_tick_fires_whatever_on_missed() -> None:
    for policy in ("skip", "run_once", "backfill"):
        result = plan(policy, down=0)
        assert result.fire == (T0,)
        assert result.skipped is None
        assert result.next_run_at == T0 + timedelta(seconds=1)


def test_skip_fires_none_of_the_missed_ticks() -> None:
    result = plan("skip", down=5)  # ticks T0..T0+4s missed, T0+5s on time
    assert result.fire == (T0 + timedelta(seconds=5),)
    assert result.skipped == T0 + timedelta(seconds=4)
    assert result.next_run_at == T0 + timedelta(seconds=6)


def test_run_once_fires_one_catch_up() -> None:
    result = plan("run_once", down=5)
    assert result.fire == (T0 + timedelta(seconds=4), T0 + timedelta(seconds=5))
    assert result.skipped == T0 + timedelta(seconds=3)


def test_backfill_fires_the_newest_missed_ticks_oldest_first() -> None:
    result = plan("backfill", 3, down=5)
    assert result.fire == tuple(T0 + timedelta(seconds=s) for s in (2, 3, 4, 5))
    assert result.skipped == T0 + timedelta(seconds=1)
    everything = plan("backfill", 10, down=5)
    assert everything.fire == tuple(T0 + timedelta(seconds=s) for s in range(6))
    assert everything.skipped is None


def test_a_long_outage_costs_only_what_fires() -> None:
    result = plan("backfill", 2, down=10_000_000)  # months of 1 s ticks
    assert len(result.fire) == 3
    assert result.next_run_at == T0 + timedelta(seconds=10_000_001)


def test_a_short_outage_costs_only_its_missed_ticks_whatever_the_backfill_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The walk back stops at the first unfired tick: the largest limit after a five-tick
    # outage reads six ticks, not ten thousand (seconds of a pass for a cron spec).
    walked = []
    backward = schedule_spec._backward

    def counted(spec: ScheduleSpec, at: datetime) -> Iterator[datetime]:
        for tick in backward(spec, at):
            walked.append(tick)
            yield tick

    monkeypatch.setattr(schedule_spec, "_backward", counted)
    result = plan("backfill", schedule_spec.MAX_BACKFILL, down=5)
    assert result.fire == tuple(T0 + timedelta(seconds=s) for s in range(6))
    assert result.skipped is None
    assert len(walked) <= 6


def test_cap_leaves_the_rest_for_the_next_pass() -> None:
    result = plan("skip", down=9, grace=60, cap=4)
    assert result.fire == tuple(T0 + timedelta(seconds=s) for s in range(4))
    assert result.next_run_at == T0 + timedelta(seconds=4)


def test_a_horizon_fires_the_ticks_before_it_ahead_of_their_instant() -> None:
    spec = parse_spec("@every 1s")
    kw = {"grace": timedelta(seconds=60), "on_missed": "skip", "backfill_limit": 0, "cap": 100}
    now = T0 - timedelta(milliseconds=1500)  # T0 is 1.5 s away
    early = plan_pass(spec, next_run_at=T0, now=now, horizon=now + timedelta(seconds=3), **kw)
    assert early.fire == (T0, T0 + timedelta(seconds=1))  # T0 + 2 s is past the horizon
    assert early.next_run_at == T0 + timedelta(seconds=2)
    nothing = plan_pass(spec, next_run_at=T0, now=now, horizon=now, **kw)
    assert (nothing.fire, nothing.next_run_at) == ((), T0)
    # A horizon before now is now: the due ticks fire all the same.
    late = plan_pass(spec, next_run_at=T0, now=T0, horizon=T0 - timedelta(hours=1), **kw)
    assert late.fire == (T0,)


def test_dst_gap_in_a_pass() -> None:
    spec = parse_spec("CRON_TZ=Europe/Berlin 30 2 * * *")
    before = local(BERLIN, 2027, 3, 27, 2, 30)
    result = plan_pass(
        spec,
        next_run_at=next_tick(spec, before),  # type: ignore[arg-type]
        now=local(BERLIN, 2027, 3, 28, 4, 0),
        grace=timedelta(seconds=30),
        on_missed="backfill",
        backfill_limit=5,
        cap=10,
    )
    # The 28th has no 02:30: its tick was 03:00 CEST, missed by 04:00 and backfilled.
    assert result.fire == (utc(2027, 3, 28, 1, 0),)
    assert result.next_run_at == local(BERLIN, 2027, 3, 29, 2, 30)


# -- origin ids --------------------------------------------------------------------------


def test_tick_ids_round_trip() -> None:
    tick = utc(2027, 3, 28, 1, 30)
    job_id = tick_id("nightly:report", tick)
    assert job_id == f"sched:nightly:report:{int(tick.timestamp()) * 1000}"
    origin = origin_of(job_id)
    assert origin is not None
    assert (origin.schedule, origin.tick_at) == ("nightly:report", tick)
    assert origin.tick_at.tzinfo is UTC
    manual = origin_of(tick_id("nightly", tick, suffix="01JABC"))
    assert manual is not None and manual.tick_at == tick
    for other in (None, "", "01J0000", "sched:", "sched:x:notanumber", "sched::123"):
        assert origin_of(other) is None

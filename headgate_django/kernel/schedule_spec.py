"""Schedule specs: parse them, find their ticks, decide what a scheduler pass fires.

Cron fields are matched by ``cronsim`` (no home-made parser), but over *naive wall-clock*
time; this module turns each wall-clock match into an instant. Our rules across DST
changes: a local time that does not exist (in a spring-forward gap) fires at the gap's
end, the first instant after it, so a daily job still runs on a day whose midnight is
skipped (America/Santiago, America/Havana); several such times fire once there. A
repeated local time fires once, at its first occurrence. cronsim given aware datetimes
runs a ``*``-hour job in both passes of a repeated hour, so it is given naive wall-clock
times and each match is converted here.

``@every`` intervals are epoch-aligned in UTC (ticks at whole multiples of the interval
since 1970-01-01T00:00Z), so every scheduler, whenever it starts, agrees on the ticks.
Every instant here is an aware UTC datetime; "now" always comes from the caller (the
store clock), never from this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from headgate_django.exceptions import ScheduleError

ON_MISSED = ("skip", "run_once", "backfill")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(?:\d+[smhd])+\Z")
_PART = re.compile(r"(\d+)([smhd])")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-.:]*\Z")
MAX_NAME = 128
#: The longest spec text :func:`accept_spec` takes (``Schedule.spec``'s column): a longer
#: one, a cron list of every minute, hour and day say, would be refused by the database.
MAX_SPEC = 255
#: The longest ``@every`` interval: about the 50 years over which a cron spec's next tick
#: is searched (cronsim gives up there, and :func:`parse_spec` refuses a spec that never
#: fires). A slower schedule would not fire in the life of a deployment, and the bound
#: keeps its ticks (and the durations that reach them) inside ``datetime``'s range.
MAX_EVERY = timedelta(days=50 * 365)
_MAX_EVERY_SECONDS = MAX_EVERY // _SECOND
#: The most missed ticks a backfill fires: one pass plans, inserts and records every one
#: of them in one transaction, so a limit of millions after a long outage would hold the
#: scheduler (and its duty lease) far past its budget.
MAX_BACKFILL = 10_000


@dataclass(frozen=True)
class ScheduleSpec:
    """A parsed spec: ``text`` as stored, and either a cron expression or an interval."""

    text: str
    tz: str
    cron: str | None = None
    every: int | None = None  # seconds


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or not _NAME.match(name):
        raise ScheduleError(
            f"invalid schedule name {name!r}: 1–{MAX_NAME} letters, digits and _-.: , "
            "starting with a letter, digit or '_'"
        )
    return name


def parse_spec(spec: str | timedelta, tz: str | None = None) -> ScheduleSpec:
    """Parse ``spec`` (cron, ``@every``, a shorthand or a ``timedelta``) in zone ``tz``.

    Raises :class:`ScheduleError` for anything it cannot fire: a malformed expression, an
    unknown zone, an interval that is not a positive whole number of seconds or is longer
    than :data:`MAX_EVERY`, a cron expression that never matches, or two different zones
    (prefix and argument).
    """
    if isinstance(spec, timedelta):
        return _interval(spec, f"@every {_seconds(spec)}s", tz)
    if not isinstance(spec, str) or not spec.strip():
        raise ScheduleError(f"a schedule spec is a non-empty string or a timedelta: {spec!r}")
    text = " ".join(spec.split())
    body = text
    if body.startswith("CRON_TZ="):
        prefix, _, body = body.partition(" ")
        zone = prefix.removeprefix("CRON_TZ=")
        if tz is not None and tz != zone:
            raise ScheduleError(f"spec says CRON_TZ={zone} but tz={tz!r}")
        tz = zone
    if body.startswith("@every"):
        return _interval(_duration(body.removeprefix("@every").strip()), text, tz)
    cron = _SHORTHANDS.get(body, body)
    if cron.startswith("@"):
        raise ScheduleError(f"unknown shorthand {body!r} (use {', '.join(_SHORTHANDS)})")
    if len(cron.split()) not in (5, 6):
        raise ScheduleError(f"a cron spec has 5 fields (minute…) or 6 (second…): {body!r}")
    zone_name = _zone("UTC" if tz is None else tz)
    try:
        CronSim(cron, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ScheduleError(f"malformed cron spec {body!r}: {exc}") from exc
    parsed = ScheduleSpec(text=text, tz=zone_name, cron=cron)
    if next_tick(parsed, EPOCH) is None:
        raise ScheduleError(f"cron spec {body!r} never fires")
    return parsed


def accept_spec(spec: str | timedelta, tz: str | None = None) -> ScheduleSpec:
    """:func:`parse_spec` for a spec being stored (``upsert``, the settings): refused too
    when its text is over :data:`MAX_SPEC` characters. A stored row is read back by
    :func:`parse_spec` alone, so one stored before the bound (SQLite kept it) still fires."""
    length = len(" ".join(spec.split())) if isinstance(spec, str) else 0
    if length > MAX_SPEC:
        raise ScheduleError(f"a schedule spec is at most {MAX_SPEC} characters, not {length}")
    return parse_spec(spec, tz)


def _seconds(every: timedelta) -> int:
    if every <= timedelta(0) or every % _SECOND:
        raise ScheduleError(f"an interval is a positive whole number of seconds, not {every}")
    if every > MAX_EVERY:
        raise _too_long(str(every))
    return int(every.total_seconds())


def _duration(text: str) -> timedelta:
    if not _DURATION.match(text):
        raise ScheduleError(f"@every takes a duration such as 30s, 15m, 1h30m: {text!r}")
    # Bounded while still integers: timedelta overflows past 999,999,999 days, and int()
    # refuses thousands of digits. A number longer than the bound in seconds is over it.
    numbers = _PART.findall(text)
    if any(len(n.lstrip("0")) > len(str(_MAX_EVERY_SECONDS)) for n, _ in numbers):
        raise _too_long(text)
    seconds = sum(int(n) * _UNITS[u] for n, u in numbers)
    if seconds > _MAX_EVERY_SECONDS:
        raise _too_long(text)
    return timedelta(seconds=seconds)


def _too_long(shown: str) -> ScheduleError:
    if len(shown) > 40:
        shown = shown[:40] + "…"
    return ScheduleError(
        f"an @every interval is at most {MAX_EVERY.days}d (about 50 years), not {shown}"
    )


def _interval(every: timedelta, text: str, tz: str | None) -> ScheduleSpec:
    if tz not in (None, "UTC"):
        raise ScheduleError("@every is aligned to the UTC epoch and takes no time zone")
    return ScheduleSpec(text=text, tz="UTC", every=_seconds(every))


def _zone(name: str) -> str:
    """``name`` if it is a zone. ``ZoneInfo`` reads the file of that name: a region such as
    ``America`` is a directory of them (``IsADirectoryError``), a long name one the system
    refuses (``OSError``), and an empty one is no zone at all (not UTC)."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ScheduleError(f"unknown time zone {name!r}") from exc
    return name


# -- ticks ---------------------------------------------------------------------------------


def next_tick(spec: ScheduleSpec, after: datetime) -> datetime | None:
    """The first tick strictly after ``after``; None if there is none within 50 years."""
    return next(_forward(spec, after), None)


def next_ticks(spec: ScheduleSpec, after: datetime, n: int) -> list[datetime]:
    """The first ``n`` ticks strictly after ``after``, oldest first."""
    ticks: list[datetime] = []
    for tick in _forward(spec, after):
        if len(ticks) == n:
            break
        ticks.append(tick)
    return ticks


def upcoming(spec: ScheduleSpec, first: datetime | None, n: int) -> list[datetime]:
    """The next ``n`` fire times of a schedule whose first unfired tick is ``first``."""
    if first is None or n <= 0:
        return []
    return [first, *next_ticks(spec, first, n - 1)]


def previous_ticks(
    spec: ScheduleSpec, at: datetime, n: int, *, not_before: datetime | None = None
) -> list[datetime]:
    """The newest ``n`` ticks at or before ``at`` and not before ``not_before``, newest
    first. The walk stops at ``not_before``: a pass after a short outage reads the
    outage's ticks, not ``n`` of them (a backfill limit of a million)."""
    ticks: list[datetime] = []
    for tick in _backward(spec, at):
        if len(ticks) == n or (not_before is not None and tick < not_before):
            break
        ticks.append(tick)
    return ticks


def _forward(spec: ScheduleSpec, after: datetime) -> Iterator[datetime]:
    if spec.every is not None:
        step = spec.every * 1_000_000
        k = (after - EPOCH) // timedelta(microseconds=1) // step + 1
        yield from _epoch_ticks(k, step, 1)
        return
    assert spec.cron is not None
    zone = ZoneInfo(spec.tz)
    start = after.astimezone(zone).replace(tzinfo=None)
    last = after
    for wall in CronSim(spec.cron, start):
        instant = _instant(wall, zone)
        # A wall time inside a repeated hour maps to its first occurrence, which can lie
        # before ``after`` when ``after`` is in the second one: not a tick after it. The
        # wall times of a gap all map to its end: one tick.
        if instant > last:
            last = instant
            yield instant


def _backward(spec: ScheduleSpec, at: datetime) -> Iterator[datetime]:
    if spec.every is not None:
        step = spec.every * 1_000_000
        k = (at - EPOCH) // timedelta(microseconds=1) // step
        yield from _epoch_ticks(k, step, -1)
        return
    assert spec.cron is not None
    zone = ZoneInfo(spec.tz)
    local = at.astimezone(zone)
    # In the second pass of a repeated hour, wall times up to the end of that hour were
    # first lived before ``at``: start above them. One second more makes ``at`` inclusive.
    start = local.replace(tzinfo=None, fold=0) + _SECOND
    if local.fold:
        start += (local.replace(fold=0).utcoffset() or timedelta(0)) - (
            local.utcoffset() or timedelta(0)
        )
    last: datetime | None = None
    for wall in CronSim(spec.cron, start, reverse=True):
        instant = _instant(wall, zone)
        if instant <= at and (last is None or instant < last):
            last = instant
            yield instant


def _epoch_ticks(k: int, step: int, direction: int) -> Iterator[datetime]:
    """Ticks ``k``, ``k + direction``, … of an interval of ``step`` microseconds, ending
    where ``datetime`` does (years 1–9999): a backfill of 10,000 yearly ticks walks back
    past year 1, and that is the end of the ticks, not an ``OverflowError``."""
    while True:
        try:
            tick = EPOCH + timedelta(microseconds=k * step)
        except OverflowError:
            return
        yield tick
        k += direction


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of local ``wall`` time: its first occurrence or, for a time in the
    gap of a spring-forward change, the gap's end."""
    instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    return _gap_end(wall.replace(tzinfo=zone, fold=1).astimezone(UTC), instant, zone)


def _gap_end(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The instant the zone's offset changes, between ``before`` (still the old offset)
    and ``after`` (the new one): a bisection to the second, as zones change on whole
    seconds (a gap is hours long at most: about 14 steps)."""
    offset = before.astimezone(zone).utcoffset()
    while after - before > _SECOND:
        middle = before + (after - before) // _SECOND // 2 * _SECOND
        if middle.astimezone(zone).utcoffset() == offset:
            before = middle
        else:
            after = middle
    return after


# -- what a pass fires ------------------------------------------------------------------


@dataclass(frozen=True)
class TickPlan:
    """What one scheduler pass does for one schedule.

    ``fire`` holds the ticks to enqueue, oldest first; ``skipped`` is the newest missed
    tick left unfired (None when none was), for the event that says so; ``next_run_at``
    is the first tick not handled (None: the spec never fires again).
    """

    fire: tuple[datetime, ...]
    skipped: datetime | None
    next_run_at: datetime | None


def plan_pass(
    spec: ScheduleSpec,
    *,
    next_run_at: datetime,
    now: datetime,
    grace: timedelta,
    on_missed: str,
    backfill_limit: int,
    cap: int,
    horizon: datetime | None = None,
) -> TickPlan:
    """Decide which due ticks fire, given the schedule's first unfired tick and ``now``.

    A due tick is *on time* while it is at most ``grace`` old; on-time ticks always fire
    (at most ``cap`` per pass, the rest on the next pass). Older ticks were *missed*
    (nobody ran the scheduler then), and ``on_missed`` says what becomes of them:
    ``skip`` fires none, ``run_once`` the newest one, ``backfill`` the newest
    ``backfill_limit`` ones, fired oldest first. Missed ticks are found by walking back
    from the cutoff, so a long outage costs no more than the ticks that fire.

    ``horizon`` (at or after ``now``) fires the ticks up to it ahead of their instant: a
    task tick's job is written early, to become claimable at the tick.
    """
    check_on_missed(on_missed, backfill_limit)
    cutoff = now - grace
    catch_up: list[datetime] = []
    skipped = None
    first: datetime | None = next_run_at
    if next_run_at <= cutoff:
        keep = {"skip": 0, "run_once": 1, "backfill": backfill_limit}[on_missed]
        missed = previous_ticks(spec, cutoff, keep + 1, not_before=next_run_at)
        catch_up = sorted(missed[:keep])
        skipped = missed[keep] if len(missed) > keep else None
        first = next_tick(spec, cutoff)
    on_time: list[datetime] = []
    tick: datetime | None = first
    until = now if horizon is None else max(horizon, now)
    while tick is not None and tick <= until and len(on_time) < cap:
        on_time.append(tick)
        tick = next_tick(spec, tick)
    return TickPlan(fire=tuple(catch_up + on_time), skipped=skipped, next_run_at=tick)


def check_on_missed(on_missed: object, backfill_limit: object) -> None:
    if on_missed not in ON_MISSED:
        raise ScheduleError(f"on_missed is one of {', '.join(ON_MISSED)}, not {on_missed!r}")
    if not isinstance(backfill_limit, int) or isinstance(backfill_limit, bool):
        raise ScheduleError(f"backfill_limit is an integer, not {backfill_limit!r}")
    if backfill_limit < 0:
        raise ScheduleError(f"backfill_limit cannot be negative ({backfill_limit})")
    if backfill_limit > MAX_BACKFILL:
        raise ScheduleError(f"backfill_limit is at most {MAX_BACKFILL:,}, not {backfill_limit}")

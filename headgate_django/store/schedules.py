"""Periodic schedules and their tick events.

Exactly one job per tick rests on two things here. The scheduler advances a batch of
schedules' ``next_run_at`` with a compare-and-set (the rows locked, each value compared
with what the pass read) in the same transaction as the ticks' enqueues and their events,
so of two passes that read the same schedule only one commits its ticks; the other waits
for the first one's row locks, then sees the new value, and records ``deduplicated``.
And a tick's job id is derived from (schedule, tick) (``kernel.schedule_origin``), so even
a pass replayed from an older read finds the job already there. Every instant is the
store clock's.
"""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, F, Max, Q, Window
from django.db.models.functions import RowNumber

from headgate_django.exceptions import HeadgateError, NotFoundError, ScheduleError
from headgate_django.kernel.schedule_origin import origin_of, tick_id
from headgate_django.kernel.schedule_spec import (
    ScheduleSpec,
    next_tick,
    parse_spec,
)
from headgate_django.kernel.states import State
from headgate_django.models import Job, Schedule, ScheduleEvent
from headgate_django.store.collation import refuse_case_clash
from headgate_django.store.vendor import (
    connection_for,
    db_now,
    pg_list,
    pg_list_param,
    vendor,
)

#: Events kept per schedule: the newest ones (up to TRIM_SLACK more wait for a trim).
EVENTS_KEPT = 100
TRIM_SLACK = 20
#: Up to this many schedules' events written at once, every one's count is checked.
TRIM_ALWAYS = 20
MAX_REASON = 64
#: ``Schedule.plan_error``'s column.
MAX_PLAN_ERROR = 255


@dataclass(frozen=True)
class ScheduleRow:
    pk: int
    name: str
    spec: str
    timezone: str
    target: dict[str, Any]
    on_missed: str
    backfill_limit: int
    paused: bool
    declared: bool
    next_run_at: datetime | None
    last_enqueued_at: datetime | None
    plan_error: str
    created_at: datetime
    updated_at: datetime
    revision: int

    @property
    def parsed(self) -> ScheduleSpec:
        return _parsed(self.spec, self.timezone)

    @property
    def unplannable(self) -> str | None:
        """Why this schedule's ticks cannot be computed, None when they can: the reason
        the scheduler parked it for or, before a pass gets to it, why its stored spec
        does not parse here (a zone gone from the tz database, a row written by hand).
        A read shows this instead of failing on it."""
        if self.plan_error:
            return self.plan_error
        try:
            _parsed(self.spec, self.timezone)
        except HeadgateError as exc:
            return str(exc)
        return None


#: Parsing a cron spec builds cronsim iterators (about 0.1 ms each); a pass reads the
#: same few specs over and over, so each stored (spec, zone) is parsed once per process.
_parsed = lru_cache(maxsize=4096)(parse_spec)


class DueSchedule(NamedTuple):
    """What a scheduler pass reads of a due schedule: only what planning and firing use
    (a pass reads thousands; each instant column read costs a parse)."""

    pk: int
    name: str
    spec: str
    timezone: str
    target: dict[str, Any]
    on_missed: str
    backfill_limit: int
    next_run_at: datetime
    revision: int

    @property
    def parsed(self) -> ScheduleSpec:
        return _parsed(self.spec, self.timezone)


@dataclass(frozen=True)
class EventRow:
    schedule_name: str
    tick_at: datetime
    outcome: str
    reason: str = ""
    target_id: str = ""
    recorded_at: datetime | None = None


_FIELDS = [f.name for f in ScheduleRow.__dataclass_fields__.values()]  # type: ignore[attr-defined]


def _row(obj: Schedule) -> ScheduleRow:
    return ScheduleRow(**{name: getattr(obj, name) for name in _FIELDS})


def _named(name: str, using: str, *, lock: bool = False) -> Schedule | None:
    """The schedule stored under exactly ``name``, or None; with ``lock``, its row locked
    until the transaction ends.

    MySQL/MariaDB's usual collations compare text without case, so ``name = 'nightly'``
    also finds ``Nightly``: that row is another schedule, and acting on it (replacing,
    pausing or deleting it) would be acting on what the caller did not name.

    The lock is taken by primary key, after a plain read of it, as the scheduler's pass
    takes its own (:func:`_lock_batch`): a ``FOR UPDATE`` by name would hold the name
    index's entry while it waited for the row, which a pass holding the row and about to
    write it through that index waits for in turn (InnoDB's deadlock 1213)."""
    rows = Schedule.objects.using(using)
    if not lock:
        obj = rows.filter(name=name).first()
    else:
        pk = rows.filter(name=name).values_list("pk", flat=True).first()
        obj = None if pk is None else rows.select_for_update().filter(pk=pk).first()
    return obj if obj is not None and obj.name == name else None


def schedule_upsert(
    *,
    name: str,
    spec: ScheduleSpec,
    target: dict[str, Any],
    on_missed: str,
    backfill_limit: int,
    paused: bool,
    declared: bool = False,
    using: str = "default",
) -> ScheduleRow:
    """Create or replace the schedule ``name``. The same spec (text and zone) keeps its
    phase (``next_run_at`` stays); a new or changed spec, or a paused schedule unpaused
    (as :func:`schedule_set_paused` resumes it: the ticks while paused were not missed),
    or a parked one (its spec just passed the checks again), is anchored at the first tick
    after now.

    Two upserts creating one new name at once (workers starting together with a newly
    declared schedule) both find no row, and the second insert fails on the unique name
    once the first commits: that one then replaces the new row, as if it had come second.
    """
    args = (name, spec, target, on_missed, backfill_limit, paused, declared, using)
    try:
        return _upsert(*args)
    except IntegrityError:
        return _upsert(*args)


def _upsert(
    name: str,
    spec: ScheduleSpec,
    target: dict[str, Any],
    on_missed: str,
    backfill_limit: int,
    paused: bool,
    declared: bool,
    using: str,
) -> ScheduleRow:
    with transaction.atomic(using=using):
        now = db_now(using)
        obj = _named(name, using, lock=True)
        if obj is None:
            refuse_case_clash(Schedule, "name", name, "schedule", using, ScheduleError)
            obj = Schedule(name=name, created_at=now)
        respec = obj.pk is None or (obj.spec, obj.timezone) != (spec.text, spec.tz)
        withdrawn: list[datetime] = []
        if obj.pk is not None and (respec or paused or obj.target != target):
            withdrawn = _withdraw_ahead(obj, now, "schedule changed", using)
        before = _edited(obj)
        if respec or (obj.paused and not paused) or obj.plan_error:
            obj.next_run_at = next_tick(spec, now)
        elif withdrawn:  # the same phase: those ticks fire again, as the new target
            obj.next_run_at = withdrawn[0]
        obj.spec, obj.timezone, obj.target = spec.text, spec.tz, target
        obj.on_missed, obj.backfill_limit = on_missed, backfill_limit
        obj.paused, obj.declared, obj.updated_at = paused, declared, now
        obj.plan_error = ""
        _save_edit(obj, before, using)
        return _row(obj)


def _edited(obj: Schedule) -> tuple[Any, ...]:
    """What an operator's edit of ``obj`` may change that a scheduler pass's read of it
    relies on: its definition, whether it is paused, and its next run."""
    return (obj.spec, obj.timezone, obj.target, obj.paused, obj.next_run_at)


def _save_edit(obj: Schedule, before: tuple[Any, ...], using: str) -> None:
    """Save an operator's edit of ``obj``; one that changed :func:`_edited` (``before`` is
    its value as read) counts in ``revision``.

    A pass compares the count at commit (:func:`_lost`): an edit undone before then (a
    pause and a resume, a spec changed and changed back) leaves the schedule as the pass
    read it but for a re-anchored ``next_run_at``, which another pass firing its ticks
    would have moved too. Only the count tells the two apart. An edit that changes none
    of these (a declared schedule synced again as it is) does not count: it moved
    nothing, and counting it would have a pass that lost to another pass say the edit."""
    if _edited(obj) != before:
        obj.revision += 1
    obj.save(using=using)


def schedule_get(name: str, *, using: str = "default") -> ScheduleRow:
    obj = _named(name, using)
    if obj is None:
        raise NotFoundError(f"no schedule named {name!r}", name=name)
    return _row(obj)


def schedule_list(
    *, after: str | None = None, limit: int | None = None, using: str = "default"
) -> list[ScheduleRow]:
    """Schedules by name; a page of ``limit`` after the name ``after`` (the console's)."""
    rows = Schedule.objects.using(using).order_by("name")
    if after is not None:
        rows = rows.filter(name__gt=after)
    return [_row(obj) for obj in (rows[:limit] if limit is not None else rows)]


def schedule_recent_events(
    names: Sequence[str], *, per_schedule: int, using: str = "default"
) -> dict[str, list[EventRow]]:
    """The newest ``per_schedule`` events of each of ``names``, newest first, in one query
    (a row number over each schedule's events, which are at most the kept ones)."""
    ranked = (
        ScheduleEvent.objects.using(using)
        .filter(schedule_name__in=list(names))
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("schedule_name")], order_by=F("id").desc())
        )
        .filter(rank__lte=per_schedule)
        .order_by("schedule_name", "-id")
    )
    out: dict[str, list[EventRow]] = {name: [] for name in names}
    for e in ranked:
        out[e.schedule_name].append(
            EventRow(e.schedule_name, e.tick_at, e.outcome, e.reason, e.target_id, e.recorded_at)
        )
    return out


def schedule_fingerprint(*, using: str = "default") -> tuple[Any, ...]:
    """What moves whenever a console's schedule list would change: the schedules' count
    and newest ``updated_at`` (every pass that moves one stamps it) and the newest event."""
    schedules = Schedule.objects.using(using).aggregate(n=Count("id"), at=Max("updated_at"))
    newest = ScheduleEvent.objects.using(using).aggregate(top=Max("id"))["top"]
    return schedules["n"], schedules["at"], newest


def schedule_set_paused(name: str, paused: bool, *, using: str = "default") -> ScheduleRow:
    """Pause or resume. Resuming anchors at the first tick after now: ticks that passed
    while paused were not missed, nobody wanted them. Resuming a parked schedule plans it
    again (its zone may be back in the tz database): it raises the spec's
    :class:`ScheduleError` and stays parked when it still cannot be planned."""
    with transaction.atomic(using=using):
        now = db_now(using)
        obj = _named(name, using, lock=True)
        if obj is None:
            raise NotFoundError(f"no schedule named {name!r}", name=name)
        before = _edited(obj)
        if not paused and (obj.paused or obj.plan_error):
            obj.next_run_at = next_tick(parse_spec(obj.spec, tz=obj.timezone), now)
            obj.plan_error = ""
        elif paused and not obj.paused:
            _withdraw_ahead(obj, now, "schedule paused", using)
        obj.paused, obj.updated_at = paused, now
        _save_edit(obj, before, using)
        return _row(obj)


def schedule_delete(name: str, *, using: str = "default") -> None:
    """Delete the schedule; its events stay (they are the audit of what it did)."""
    with transaction.atomic(using=using):
        obj = _named(name, using, lock=True)
        if obj is None:
            raise NotFoundError(f"no schedule named {name!r}", name=name)
        _withdraw_ahead(obj, db_now(using), "schedule deleted", using)
        obj.delete(using=using)


def _withdraw_ahead(obj: Schedule, now: datetime, reason: str, using: str) -> list[datetime]:
    """Delete the jobs of ``obj``'s task ticks written ahead of their instant (the
    scheduler's lookahead) that still wait, so that a pause, a change or a delete applies
    to every tick after it, as it would without the lookahead. An event says so for each.
    The withdrawn ticks, oldest first.

    Only ticks that never ran (``fence`` 0: never claimed). An operator may promote a
    tick written ahead; once it ran it may have done its effects (``ctx.once``) and
    snoozed, scheduled past now again: it is kept, with its records and what it stored,
    as a tick that reached its instant would be. They are found by id: a tick's job id is
    the schedule's prefix and the tick's epoch milliseconds (13 digits for centuries), so
    the ticks after ``now`` are one range of the primary key, whatever the spec's grid was
    when they were written.
    """
    if obj.target.get("type") != "task":
        return []
    after = tick_id(obj.name, now)
    prefix = after.rpartition(":")[0]
    waiting = {"state": State.SCHEDULED.value, "fence": 0}
    ahead = Job.objects.using(using).filter(id__gt=after, id__lt=f"{prefix};", **waiting)
    ticks: dict[str, datetime] = {}  # a tick's job is scheduled for its exact instant
    for job_id, tick_at in ahead.values_list("id", "scheduled_at"):
        origin = origin_of(job_id)  # a longer name ("<name>:x") shares the range
        if origin is not None and origin.schedule == obj.name and tick_at > now:
            ticks[job_id] = tick_at
    if ticks:
        # Ticks that never ran have no effect records to delete with them.
        Job.objects.using(using).filter(id__in=list(ticks), **waiting).delete()
        events = [EventRow(obj.name, t, "skipped", f"withdrawn: {reason}") for t in ticks.values()]
        schedule_events_record(sorted(events, key=lambda e: e.tick_at), now=now, using=using)
    return sorted(ticks.values())


def schedule_pause_undeclared(declared: Sequence[str], *, using: str = "default") -> list[str]:
    """Pause the schedules once declared in settings and no longer there, and clear their
    ``declared`` flag: from now on they are runtime schedules, so one an operator resumes
    is not paused again by the next worker's start. The names of those it paused."""
    stale = Schedule.objects.using(using).filter(declared=True)
    stale = stale.exclude(name__in=list(declared))
    # Every worker's start asks; almost always nothing is stale, and one read says so
    # without the transaction's two round trips and the store clock's one.
    if not stale.exists():
        return []
    with transaction.atomic(using=using):
        now = db_now(using)
        # Locked by primary key after a plain read of the keys, as every writer of a
        # schedule locks it (see _named); a pause withdraws the ticks written ahead, as
        # schedule_set_paused's does.
        keys = sorted(stale.values_list("pk", flat=True))
        rows = list(stale.select_for_update().filter(pk__in=keys).order_by("pk"))
        running = [obj.name for obj in rows if not obj.paused]
        for obj in rows:
            before = _edited(obj)
            if not obj.paused:
                _withdraw_ahead(obj, now, "schedule no longer declared", using)
            obj.paused, obj.declared, obj.updated_at = True, False, now
            _save_edit(obj, before, using)
    return sorted(running)


def schedule_due(
    *, limit: int, lookahead: timedelta = timedelta(0), using: str = "default"
) -> tuple[datetime, list[DueSchedule]]:
    """The store clock's now and up to ``limit`` unpaused schedules due by then, the most
    overdue first; task schedules count as due ``lookahead`` early (their tick's job is
    written ahead, scheduled for the tick). Nothing is locked: :func:`schedule_advance_many`
    decides who fires a tick, so that user code (a workflow factory) runs between the two,
    outside any transaction."""
    now = db_now(using)
    due = Schedule.objects.using(using).filter(paused=False, next_run_at__lte=now + lookahead)
    if lookahead:
        due = due.filter(Q(next_run_at__lte=now) | Q(target__type="task"))
    # Tuples, not model instances: a pass reads thousands of these. Ordered by the
    # ``(paused, next_run_at)`` index alone, so the read stops after ``limit`` entries; a
    # tie-break on the name would sort every due schedule again for each batch (10,000
    # schedules of one minute spec all tie).
    rows = due.order_by("next_run_at").values_list(*DueSchedule._fields)[:limit]
    return now, [DueSchedule(*values) for values in rows]


def schedule_next_due_in(
    *, lookahead: timedelta = timedelta(0), using: str = "default"
) -> float | None:
    """Seconds from the store clock's now until a schedule is due (zero or less when one
    is; a task schedule ``lookahead`` before its ``next_run_at``), None when no schedule
    will fire: when the scheduler should wake. One or two reads of the
    ``(paused, next_run_at)`` index."""
    now = db_now(using)
    due = Schedule.objects.using(using).filter(paused=False, next_run_at__isnull=False)
    first = due.order_by("next_run_at").values_list("next_run_at", "target").first()
    if first is None:
        return None
    at, target = first
    assert at is not None  # the filter leaves out schedules that never fire again
    if lookahead and target.get("type") == "task":
        at -= lookahead
    elif lookahead:  # the first task schedule may be due sooner, ``lookahead`` early
        task = due.filter(target__type="task").order_by("next_run_at")
        first_task: datetime | None = task.values_list("next_run_at", flat=True).first()
        if first_task is not None:
            at = min(at, first_task - lookahead)
    return (at - now).total_seconds()


@dataclass(frozen=True)
class Advance:
    """One schedule's move in a batch: from ``expected`` to ``next_run_at``; ``starts``
    when the move fires ticks (so ``last_enqueued_at`` is stamped). ``definition`` is
    the ``(spec, timezone, target)`` the ticks were planned from. ``parked``, when not
    empty, is why its ticks could not be planned: the move parks it (``next_run_at``
    None, out of the due scan) with that reason as its ``plan_error``. ``pk`` and
    ``revision`` are the schedule's row and edit count as the pass read them."""

    pk: int
    name: str
    expected: datetime
    next_run_at: datetime | None
    starts: bool
    definition: tuple[str, str, dict[str, Any]]
    revision: int
    parked: str = ""


#: Why a schedule of a batch did not move (the event of each of its ticks says so).
LOST_DELETED = "schedule deleted before it fired"
LOST_RECREATED = "schedule deleted and re-created before it fired"
LOST_PAUSED = "schedule paused before it fired"
LOST_CHANGED = "schedule changed before it fired"
LOST_RESTORED = "schedule paused or changed, then restored, before it fired"
LOST_MOVED = "fired by another pass"


def schedule_advance_many(
    advances: Sequence[Advance],
    *,
    fire: Callable[[list[str]], list[EventRow]],
    decided_at: datetime,
    using: str = "default",
) -> dict[str, str]:
    """Move a batch of schedules and, in the same transaction, ``fire(won)`` (the ticks of
    the schedules in ``won``, returning their events) and record the events.

    The batch's rows are locked (``SELECT … FOR UPDATE`` in name order on PostgreSQL, by
    primary key in its order on MySQL/MariaDB, so two overlapping passes never deadlock;
    SQLite's ``BEGIN IMMEDIATE`` holds the whole database) and each one's
    ``next_run_at`` and definition are compared with what the pass read: a schedule whose
    value moved (another pass fired these ticks, or an operator's edit re-anchored it),
    whose spec, zone or target changed (an ``upsert`` that keeps the phase would otherwise
    be followed by the old target's tick, written ahead after the change withdrew it) or
    that was paused or deleted since is not in ``won`` and nothing is written for it. The winners
    move with one ``UPDATE`` per distinct new ``next_run_at`` (one for a batch of
    schedules that share a spec and phase). Every instant written is ``decided_at``, the
    store-clock instant the pass planned at: the events' (so which ticks were on time and
    which missed can be read back from them), ``updated_at`` and, when the move
    ``starts`` ticks, ``last_enqueued_at``. Returns the schedules that lost, each with
    why (``LOST_…``): deleted (and maybe re-created under its name), paused, changed,
    edited and restored, or moved by another pass.
    """
    if not advances:
        return {}
    conn = connection_for(using)
    with transaction.atomic(using=using):
        current = _lock_batch(conn, [a.name for a in advances], using)
        lost = {a.name: why for a in advances if (why := _lost(a, current.get(a.name)))}
        won = [a for a in advances if a.name not in lost]
        groups: dict[tuple[datetime | None, bool, str], list[str]] = defaultdict(list)
        for a in won:
            groups[(a.next_run_at, a.starts, a.parked[:MAX_PLAN_ERROR])].append(a.name)
        for (next_run_at, starts, parked), names in groups.items():
            keys = [current[name].pk for name in names]
            _move(conn, names, keys, _Move(next_run_at, decided_at, starts, parked), using)
        schedule_events_record(fire([a.name for a in won]), now=decided_at, using=using)
        return lost


class _Locked(NamedTuple):
    """A batch's schedule as its lock read it."""

    pk: int
    paused: bool
    next_run_at: datetime | None
    definition: tuple[str, str, dict[str, Any]]
    revision: int


def _lost(advance: Advance, locked: _Locked | None) -> str:
    """Why ``advance`` cannot be applied to the schedule as ``locked``; empty if it can.

    A resume, or a spec or zone changed and changed back, anchors ``next_run_at`` at the
    first tick after it, so a schedule edited and restored since the read has moved as if
    another pass had fired it: only its edit count (:func:`_save_edit`) tells the two
    apart. When the re-anchored run lands on the very tick the pass read, the pass fires
    it, as it would have had the edit come first.

    A schedule deleted and re-created under its name since the read is another row: the
    edit count starts again, and the new row's next run is the first tick after its
    creation, so by name alone it read as an edit restored, as another pass's firing or,
    re-created on the very tick the pass read, as the schedule itself, which then fired
    the old one's planned ticks as its own. The primary key tells them apart: it is never
    given again (a sequence on PostgreSQL, ``AUTOINCREMENT`` on SQLite, InnoDB's counter
    kept across restarts since MySQL 8 and MariaDB 10.2)."""
    if locked is None:
        return LOST_DELETED
    if locked.pk != advance.pk:
        return LOST_RECREATED
    if locked.paused:
        return LOST_PAUSED
    if locked.definition != advance.definition:
        return LOST_CHANGED
    if locked.next_run_at == advance.expected:
        return ""
    if locked.revision != advance.revision:
        return LOST_RESTORED
    return LOST_MOVED


# A pass's batch names hundreds of schedules. On PostgreSQL they go as one text parameter
# split by the server (``vendor.pg_list``): psycopg binding an IN list of 500 parameters,
# one by one in Python, cost more than the statements themselves. Schedule names cannot
# hold the separator (``kernel.schedule_spec.validate_name``).
_PG_LOCK = (
    f"SELECT id, name, paused, next_run_at, spec, timezone, target, revision "
    f"FROM {Schedule._meta.db_table} "
    f"WHERE name = ANY({pg_list('varchar')}) ORDER BY name FOR UPDATE"
)
_PG_MOVE = (
    f"UPDATE {Schedule._meta.db_table} "
    f"SET next_run_at = %s, updated_at = %s, plan_error = %s{{stamp}} "
    f"WHERE name = ANY({pg_list('varchar')})"
)


def _lock_batch(conn: BaseDatabaseWrapper, names: list[str], using: str) -> dict[str, _Locked]:
    """Lock the schedules of ``names`` that exist in one order (two overlapping passes
    never deadlock; SQLite's ``BEGIN IMMEDIATE`` holds the whole database); the paused
    ones too, so that a lost tick's event can say it was paused."""
    if vendor(conn) == "postgresql":
        with conn.cursor() as cursor:
            cursor.execute(_PG_LOCK, [pg_list_param(names)])
            return {  # Django has psycopg hand jsonb over as text
                name: _Locked(
                    pk,
                    paused,
                    at,
                    (spec, tz, json.loads(target) if isinstance(target, str) else target),
                    revision,
                )
                for pk, name, paused, at, spec, tz, target, revision in cursor.fetchall()
            }
    # MySQL/MariaDB (and SQLite, where it changes nothing): locked by primary key in its
    # order, after a plain read of the keys. A ``FOR UPDATE`` by name locks through the
    # name index or, for a large batch, a table scan of the rows, depending on the plan;
    # an operator's lock of one schedule by name would then hold the index entry the
    # pass's move needs while it waits for the row the pass holds. Every lock and write of a
    # schedule row here and in the operator's paths (:func:`_named`) goes by primary key.
    keys = list(Schedule.objects.using(using).filter(name__in=names).values_list("pk", flat=True))
    asked = set(names)
    rows = (
        Schedule.objects.using(using)
        .select_for_update()
        .filter(pk__in=keys)
        .order_by("pk")
        .values_list(
            "pk", "name", "paused", "next_run_at", "spec", "timezone", "target", "revision"
        )
    )
    return {
        name: _Locked(pk, paused, at, (spec, tz, target), revision)
        for pk, name, paused, at, spec, tz, target, revision in rows
        if name in asked
    }


class _Move(NamedTuple):
    next_run_at: datetime | None
    decided_at: datetime
    starts: bool
    plan_error: str


def _move(
    conn: BaseDatabaseWrapper, names: list[str], keys: list[Any], move: _Move, using: str
) -> None:
    """Write the locked schedules' new ``next_run_at`` and ``plan_error`` (empty unless
    the move parks them): by name on PostgreSQL, elsewhere by the primary keys they were
    locked by (see :func:`_lock_batch`)."""
    at = move.decided_at
    if vendor(conn) == "postgresql":
        stamp = ", last_enqueued_at = %s" if move.starts else ""
        params: list[Any] = [move.next_run_at, at, move.plan_error, *([at] if move.starts else [])]
        with conn.cursor() as cursor:
            cursor.execute(_PG_MOVE.format(stamp=stamp), [*params, pg_list_param(names)])
        return
    stamps = {"last_enqueued_at": at} if move.starts else {}
    Schedule.objects.using(using).filter(pk__in=keys).update(
        next_run_at=move.next_run_at, updated_at=at, plan_error=move.plan_error, **stamps
    )


def schedule_tick_start(write: Callable[[], str], *, using: str = "default") -> str:
    """Run one tick's ``write()`` (its enqueue) in a savepoint: its outcome. A refusal by
    the store (quarantine, id conflict) rolls back that tick alone and is raised."""
    with transaction.atomic(using=using):
        return write()


def schedule_tick_write(write: Callable[[], str], *, using: str = "default") -> tuple[str, str]:
    """:func:`schedule_tick_start`, with a refusal as the tick's failure: (outcome, reason)."""
    try:
        return schedule_tick_start(write, using=using), ""
    except HeadgateError as exc:
        return "failed", failure_reason(exc)


def failure_reason(exc: Exception) -> str:
    """What a failed tick's event says of the exception that failed it."""
    return f"{type(exc).__name__}: {exc}"


def schedule_events_record(
    events: Sequence[EventRow], *, now: datetime | None = None, using: str = "default"
) -> None:
    """Append events; a schedule past :data:`EVENTS_KEPT` + :data:`TRIM_SLACK` events is
    trimmed to its newest :data:`EVENTS_KEPT` (reads never return more than those)."""
    if not events:
        return
    at = now or db_now(using)
    with transaction.atomic(using=using):
        _insert_events(connection_for(using), events, at)
        # Trimmed in steps of TRIM_SLACK: one grouped count over the schedules written
        # (an index range of at most EVENTS_KEPT + TRIM_SLACK entries each), and a delete
        # only for a schedule that reached the slack. A pass's batch writes hundreds of
        # schedules' events at once; counting each one's would cost more than the pass
        # itself, so there each event has a 1 in TRIM_SLACK chance (a hash of schedule
        # and tick: the same for every replay) of having its schedule counted.
        names = {e.schedule_name for e in events}
        if len(names) > TRIM_ALWAYS:
            names = {e.schedule_name for e in events if _trim_drawn(e)}
        full = (
            ScheduleEvent.objects.using(using)
            .filter(schedule_name__in=names)
            .values("schedule_name")
            .annotate(n=Count("id"))
            .filter(n__gte=EVENTS_KEPT + TRIM_SLACK)
            .values_list("schedule_name", flat=True)
        )
        for name in list(full):
            mine = ScheduleEvent.objects.using(using).filter(schedule_name=name).order_by("-id")
            oldest_kept = mine.values_list("id", flat=True)[EVENTS_KEPT - 1]
            # Deleted by primary key, after a plain read of the keys: a range delete on
            # the (schedule, id) index ends on the next schedule's newest entry, which
            # InnoDB locks too; a pass and an operator that had each just written the
            # other's neighbour then waited on each other (deadlock 1213).
            stale = list(mine.filter(id__lt=oldest_kept).values_list("id", flat=True))
            ScheduleEvent.objects.using(using).filter(pk__in=stale).delete()


_EVENT_COLUMNS = "schedule_name, tick_at, outcome, reason, target_id, recorded_at"
_PG_EVENTS = (
    f"INSERT INTO {ScheduleEvent._meta.db_table} ({_EVENT_COLUMNS}) "
    f"SELECT n, t, o, r, COALESCE(i, ''), %s FROM unnest({pg_list('varchar')}, "
    f"%s::timestamptz[], {pg_list('varchar')}, %s::varchar[], {pg_list('varchar')}) "
    "AS e(n, t, o, r, i)"
)
_EVENTS = (
    f"INSERT INTO {ScheduleEvent._meta.db_table} ({_EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)"
)


def _insert_events(conn: BaseDatabaseWrapper, events: Sequence[EventRow], at: datetime) -> None:
    """One statement for a pass's batch (the ORM's ``bulk_create`` compiled each row's
    fields in Python: most of a 10,000-schedule pass). Names, outcomes and target ids
    cannot hold :func:`pg_list`'s separator; a reason, free text, goes as an array. A
    batch's only target id may be empty: ``string_to_array('')`` is an empty array, which
    ``unnest`` pads with NULL, hence the ``COALESCE``."""
    reasons = [e.reason[:MAX_REASON] for e in events]
    with conn.cursor() as cursor:
        if vendor(conn) == "postgresql":
            cursor.execute(
                _PG_EVENTS,
                [
                    at,
                    pg_list_param(e.schedule_name for e in events),
                    [e.tick_at for e in events],
                    pg_list_param(e.outcome for e in events),
                    reasons,
                    pg_list_param(e.target_id for e in events),
                ],
            )
            return
        adapt = conn.ops.adapt_datetimefield_value
        stamp = adapt(at)
        cursor.executemany(
            _EVENTS,
            [
                (e.schedule_name, adapt(e.tick_at), e.outcome, reason, e.target_id, stamp)
                for e, reason in zip(events, reasons, strict=True)
            ],
        )


def _trim_drawn(event: EventRow) -> bool:
    key = f"{event.schedule_name}@{event.tick_at.isoformat()}".encode()
    return zlib.crc32(key) % TRIM_SLACK == 0


def schedule_events(
    name: str, *, limit: int = EVENTS_KEPT, using: str = "default"
) -> list[EventRow]:
    """The newest ``limit`` events of ``name`` (which may no longer exist), newest first;
    never more than the :data:`EVENTS_KEPT` kept, whatever older ones wait for a trim."""
    rows = ScheduleEvent.objects.using(using).filter(schedule_name=name).order_by("-id")
    rows = rows[: min(limit, EVENTS_KEPT)]
    return [
        EventRow(e.schedule_name, e.tick_at, e.outcome, e.reason, e.target_id, e.recorded_at)
        for e in rows
    ]

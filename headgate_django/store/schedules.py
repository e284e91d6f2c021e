"""Periodic schedules and their tick events.

Exactly one job per tick rests on two things here. The scheduler advances
``next_run_at`` with a compare-and-set (``WHERE next_run_at = <what it read>``) in the
same transaction as the tick's enqueue and its event, so of two passes that read the same
schedule only one commits the tick; the other's compare-and-set matches no row (it waits
for the first one's row lock, then sees the new value) and it records ``deduplicated``.
And a tick's job id is derived from (schedule, tick) (``kernel.schedule_origin``), so even
a pass replayed from an older read finds the job already there. Every instant is the
store clock's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from headgate_django.exceptions import HeadgateError, NotFoundError
from headgate_django.kernel.schedule_spec import ScheduleSpec, next_tick, parse_spec
from headgate_django.models import Schedule, ScheduleEvent
from headgate_django.store.vendor import db_now

#: Events kept per schedule: the newest ones (up to TRIM_SLACK more wait for a trim).
EVENTS_KEPT = 100
TRIM_SLACK = 20
MAX_REASON = 64


@dataclass(frozen=True)
class ScheduleRow:
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
    created_at: datetime
    updated_at: datetime

    @property
    def parsed(self) -> ScheduleSpec:
        return parse_spec(self.spec, tz=self.timezone)


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
    phase (``next_run_at`` stays); a new or changed spec is anchored at the first tick
    after now."""
    with transaction.atomic(using=using):
        now = db_now(using)
        obj = Schedule.objects.using(using).select_for_update().filter(name=name).first()
        if obj is None:
            obj = Schedule(name=name, created_at=now)
        if obj.pk is None or (obj.spec, obj.timezone) != (spec.text, spec.tz):
            obj.next_run_at = next_tick(spec, now)
        obj.spec, obj.timezone, obj.target = spec.text, spec.tz, target
        obj.on_missed, obj.backfill_limit = on_missed, backfill_limit
        obj.paused, obj.declared, obj.updated_at = paused, declared, now
        obj.save(using=using)
        return _row(obj)


def schedule_get(name: str, *, using: str = "default") -> ScheduleRow:
    obj = Schedule.objects.using(using).filter(name=name).first()
    if obj is None:
        raise NotFoundError(f"no schedule named {name!r}", name=name)
    return _row(obj)


def schedule_list(*, using: str = "default") -> list[ScheduleRow]:
    return [_row(obj) for obj in Schedule.objects.using(using).order_by("name")]


def schedule_set_paused(name: str, paused: bool, *, using: str = "default") -> ScheduleRow:
    """Pause or resume. Resuming anchors at the first tick after now: ticks that passed
    while paused were not missed, nobody wanted them."""
    with transaction.atomic(using=using):
        now = db_now(using)
        obj = Schedule.objects.using(using).select_for_update().filter(name=name).first()
        if obj is None:
            raise NotFoundError(f"no schedule named {name!r}", name=name)
        if obj.paused and not paused:
            obj.next_run_at = next_tick(parse_spec(obj.spec, tz=obj.timezone), now)
        obj.paused, obj.updated_at = paused, now
        obj.save(using=using)
        return _row(obj)


def schedule_delete(name: str, *, using: str = "default") -> None:
    """Delete the schedule; its events stay (they are the audit of what it did)."""
    deleted, _ = Schedule.objects.using(using).filter(name=name).delete()
    if not deleted:
        raise NotFoundError(f"no schedule named {name!r}", name=name)


def schedule_pause_undeclared(declared: Sequence[str], *, using: str = "default") -> list[str]:
    """Pause the schedules once declared in settings and no longer there; their names."""
    with transaction.atomic(using=using):
        stale = Schedule.objects.using(using).filter(declared=True, paused=False)
        names = sorted(stale.exclude(name__in=list(declared)).values_list("name", flat=True))
        Schedule.objects.using(using).filter(name__in=names).update(
            paused=True, updated_at=db_now(using)
        )
    return names


def schedule_due(*, limit: int, using: str = "default") -> tuple[datetime, list[ScheduleRow]]:
    """The store clock's now and up to ``limit`` unpaused schedules due by then, the most
    overdue first. Nothing is locked: :func:`schedule_advance` decides who fires a tick."""
    now = db_now(using)
    due = Schedule.objects.using(using).filter(paused=False, next_run_at__lte=now)
    return now, [_row(obj) for obj in due.order_by("next_run_at", "name")[:limit]]


def schedule_advance(
    name: str,
    *,
    expected: datetime,
    next_run_at: datetime | None,
    fire: Callable[[], list[EventRow]],
    decided_at: datetime,
    starts: bool,
    skipped: EventRow | None = None,
    using: str = "default",
) -> list[EventRow] | None:
    """Move ``name`` from ``expected`` to ``next_run_at`` and, in the same transaction,
    ``fire()`` (the ticks' enqueues, returning their events) and record the events.

    Every instant written is ``decided_at``, the store-clock instant the pass planned at:
    the events' (so which ticks were on time and which missed can be read back from
    them), ``updated_at`` and, when the pass ``starts`` ticks, ``last_enqueued_at``. None
    when the compare-and-set matched no row: another pass handled these ticks (or the
    schedule was paused, changed or deleted since it was read), and nothing was written.
    """
    stamps = {"updated_at": decided_at, **({"last_enqueued_at": decided_at} if starts else {})}
    with transaction.atomic(using=using):
        moved = (
            Schedule.objects.using(using)
            .filter(name=name, paused=False, next_run_at=expected)
            .update(next_run_at=next_run_at, **stamps)
        )
        if not moved:
            return None
        events = fire()
        if skipped is not None:
            events = [skipped, *events]
        schedule_events_record(events, now=decided_at, using=using)
        return events


def schedule_tick_write(write: Callable[[], str], *, using: str = "default") -> tuple[str, str]:
    """Run one tick's ``write()`` (its enqueue) in a savepoint: (outcome, reason). A refusal
    by the store (quarantine, id conflict) rolls back that tick alone and is its failure."""
    try:
        with transaction.atomic(using=using):
            return write(), ""
    except HeadgateError as exc:
        return "failed", f"{type(exc).__name__}: {exc}"


def schedule_events_record(
    events: Sequence[EventRow], *, now: datetime | None = None, using: str = "default"
) -> None:
    """Append events; a schedule past :data:`EVENTS_KEPT` + :data:`TRIM_SLACK` events is
    trimmed to its newest :data:`EVENTS_KEPT` (reads never return more than those)."""
    if not events:
        return
    at = now or db_now(using)
    with transaction.atomic(using=using):
        ScheduleEvent.objects.using(using).bulk_create(
            ScheduleEvent(
                schedule_name=e.schedule_name,
                tick_at=e.tick_at,
                outcome=e.outcome,
                reason=e.reason[:MAX_REASON],
                target_id=e.target_id,
                recorded_at=at,
            )
            for e in events
        )
        # Trimmed in steps of TRIM_SLACK: one cheap look-up per schedule and pass, and a
        # delete only every TRIM_SLACK events, instead of a delete on every pass.
        for name in {e.schedule_name for e in events}:
            mine = ScheduleEvent.objects.using(using).filter(schedule_name=name).order_by("-id")
            if not mine[EVENTS_KEPT + TRIM_SLACK - 1 : EVENTS_KEPT + TRIM_SLACK].exists():
                continue
            oldest_kept = mine.values_list("id", flat=True)[EVENTS_KEPT - 1]
            mine.filter(id__lt=oldest_kept).delete()


def schedule_events(
    name: str, *, limit: int = EVENTS_KEPT, using: str = "default"
) -> list[EventRow]:
    """The newest ``limit`` events of ``name`` (which may no longer exist), newest first."""
    rows = ScheduleEvent.objects.using(using).filter(schedule_name=name).order_by("-id")[:limit]
    return [
        EventRow(e.schedule_name, e.tick_at, e.outcome, e.reason, e.target_id, e.recorded_at)
        for e in rows
    ]

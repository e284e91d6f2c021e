"""Periodic schedules: cron and intervals that fire exactly once per tick, on any number
of workers, for tasks, DAG workflows and durable executions.

::

    from headgate_django import schedules
    schedules.upsert("nightly", "CRON_TZ=Europe/Berlin 0 3 * * *", nightly.envelope())
    schedules.upsert("tick", "@every 30s", ping.envelope(), on_missed="backfill")

The scheduler is a maintenance duty of ``runworkers`` (one holder at a time); these
functions only read and write schedules. Importable before Django's app registry is
ready (``@schedules.workflow_factory`` in a ``tasks.py``): the store loads on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from headgate_django.kernel.schedule_origin import PeriodicOrigin, origin_of
from headgate_django.kernel.schedule_spec import (
    accept_spec,
    check_on_missed,
    upcoming,
    validate_name,
)
from headgate_django.schedules.targets import (
    DurableTarget,
    Target,
    WorkflowTarget,
    workflow_factory,
)

if TYPE_CHECKING:
    from headgate_django.store.schedules import ScheduleRow


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as stored; instants are aware UTC (store clock).

    ``plan_error`` says why its ticks cannot be computed (a zone gone from the tz
    database, a spec written by hand), None when they can; ``next_run_at`` is then None.
    The scheduler parks such a schedule (it fires nothing, and blocks no other) until an
    :func:`upsert` or a :func:`resume` plans it again."""

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
    plan_error: str | None = None


@dataclass(frozen=True)
class ScheduleEventView:
    """What one tick became: ``outcome`` is enqueued, deduplicated, failed, skipped or
    parked (the schedule's ticks could not be computed from this one on)."""

    schedule: str
    tick_at: datetime
    outcome: str
    reason: str
    target_id: str
    recorded_at: datetime | None


def _view(row: ScheduleRow) -> ScheduleView:
    """A read never fails on what is stored: a schedule that cannot be planned is shown
    with why, and without a next run."""
    why = row.unplannable
    kept = {k: v for k, v in row.__dict__.items() if k not in ("pk", "revision")}
    fields = kept | {"plan_error": why}
    if why is not None:
        fields["next_run_at"] = None
    return ScheduleView(**fields)


def workflow(factory: str) -> WorkflowTarget:
    """Target: the workflow that the registered factory ``factory`` builds for each tick."""
    return WorkflowTarget(factory)


def durable(name: str, version: str, input: Any = None, *, task_queue: str = "default") -> Any:
    """Target: a durable execution of ``name`` at ``version`` per tick."""
    return DurableTarget(name, version, input, task_queue)


def upsert(
    name: str,
    spec: str | timedelta,
    target: Target,
    *,
    tz: str | None = None,
    on_missed: str = "skip",
    backfill_limit: int = 10,
    paused: bool = False,
    using: str = "default",
) -> ScheduleView:
    """Create or replace schedule ``name``; everything is checked before anything is
    written (:class:`~headgate_django.exceptions.ScheduleError`). The same spec keeps its
    phase; a changed spec starts from the first tick after now. A schedule declared in
    ``HEADGATE["SCHEDULES"]`` is the settings' to change
    (:class:`~headgate_django.exceptions.DeclaredScheduleError`)."""
    _refuse_declared(name, "replaced")
    return _view(_upsert(name, spec, target, tz, on_missed, backfill_limit, paused, False, using))


def _upsert(
    name: str,
    spec: str | timedelta,
    target: Target,
    tz: str | None,
    on_missed: str,
    backfill_limit: int,
    paused: bool,
    declared: bool,
    using: str,
) -> ScheduleRow:
    from headgate_django.schedules.targets import encode
    from headgate_django.store.schedules import schedule_upsert

    validate_name(name)
    parsed = accept_spec(spec, tz=tz)
    check_on_missed(on_missed, backfill_limit)
    stored = encode(target)
    return schedule_upsert(
        name=name,
        spec=parsed,
        target=stored,
        on_missed=on_missed,
        backfill_limit=backfill_limit,
        paused=bool(paused),
        declared=declared,
        using=using,
    )


def _refuse_declared(name: str, what: str) -> None:
    """Settings own a declared schedule's definition: every starting worker writes it
    back, so a change made here would be undone without a word at the next start."""
    from headgate_django.exceptions import DeclaredScheduleError
    from headgate_django.schedules.declared import declared

    if name in declared():
        key = f"HEADGATE['SCHEDULES'][{name!r}]"
        raise DeclaredScheduleError(
            f"schedule {name!r} is declared in {key} and cannot be {what} at run time "
            "(workers write the settings back when they start): change the settings; "
            "pause, resume and run_now work here",
            name=name,
            setting=key,
        )


def get(name: str, *, using: str = "default") -> ScheduleView:
    from headgate_django.store.schedules import schedule_get

    return _view(schedule_get(name, using=using))


def list_schedules(
    *, after: str | None = None, limit: int | None = None, using: str = "default"
) -> list[ScheduleView]:
    """Schedules by name; with ``limit``, a page of that many after the name ``after``."""
    from headgate_django.store.schedules import schedule_list

    return [_view(row) for row in schedule_list(after=after, limit=limit, using=using)]


def pause(name: str, *, using: str = "default") -> ScheduleView:
    from headgate_django.store.schedules import schedule_set_paused

    return _view(schedule_set_paused(name, True, using=using))


def resume(name: str, *, using: str = "default") -> ScheduleView:
    """Resume from the first tick after now (ticks while paused are not caught up). A
    parked schedule is planned again, or :class:`~headgate_django.exceptions.ScheduleError`
    says why it still cannot be, and it stays parked."""
    from headgate_django.store.schedules import schedule_set_paused

    return _view(schedule_set_paused(name, False, using=using))


def delete(name: str, *, using: str = "default") -> None:
    """Delete the schedule; its events remain readable through :func:`events`. A declared
    schedule is refused like :func:`upsert`: remove it from the settings instead."""
    from headgate_django.store.schedules import schedule_delete

    _refuse_declared(name, "deleted")
    schedule_delete(name, using=using)


def run_now(name: str, *, using: str = "default") -> str:
    """Start the schedule's target once now, outside its ticks; ``next_run_at`` does not
    move. Returns the id of the job, workflow or execution it started.

    A start the store refuses raises that refusal (``QuarantinedError``,
    ``BackpressureError`` …, each with its own HTTP status), and a workflow factory that
    raises makes it raise :class:`~headgate_django.exceptions.HeadgateError`; either way
    a ``failed`` event says so."""
    from headgate_django.envelope import new_id
    from headgate_django.exceptions import HeadgateError
    from headgate_django.schedules import targets
    from headgate_django.store.schedules import (
        EventRow,
        failure_reason,
        schedule_events_record,
        schedule_get,
        schedule_tick_start,
    )
    from headgate_django.store.vendor import db_now

    row = schedule_get(name, using=using)
    firing = targets.prepare(name, row.target, db_now(using), suffix=new_id())
    write = firing.write
    try:
        if write is None:  # its workflow factory raised
            raise HeadgateError(f"run_now of schedule {name!r} failed: {firing.failure}", name=name)
        outcome = schedule_tick_start(lambda: write(using), using=using)
    except HeadgateError as exc:
        reason = firing.failure or failure_reason(exc)
        failed = EventRow(name, firing.tick_at, "failed", reason, firing.target_id)
        schedule_events_record([failed], using=using)
        raise
    event = EventRow(name, firing.tick_at, outcome, "run_now", firing.target_id)
    schedule_events_record([event], using=using)
    return firing.target_id


def events(name: str, limit: int = 100, *, using: str = "default") -> list[ScheduleEventView]:
    """The newest ``limit`` (≤ 100 are kept) events of ``name``, newest first; a deleted
    schedule's events stay."""
    from headgate_django.store.schedules import schedule_events

    return [
        ScheduleEventView(
            e.schedule_name, e.tick_at, e.outcome, e.reason, e.target_id, e.recorded_at
        )
        for e in schedule_events(name, limit=limit, using=using)
    ]


def next_runs(name: str, n: int = 5, *, using: str = "default") -> list[datetime]:
    """The next ``n`` ticks of ``name`` from its ``next_run_at`` on (aware UTC); none for a
    schedule that cannot be planned (:attr:`ScheduleView.plan_error` says why)."""
    from headgate_django.store.schedules import schedule_get

    row = schedule_get(name, using=using)
    if row.unplannable is not None:
        return []
    return upcoming(row.parsed, row.next_run_at, n)


def sync_declared(*, using: str = "default") -> dict[str, list[str]]:
    """Make the schedules in ``HEADGATE["SCHEDULES"]`` exist as declared; pause (never
    delete) those declared before and gone now. Runs when ``runworkers`` starts."""
    from headgate_django.schedules.declared import sync

    return sync(_upsert, using=using)


__all__ = [
    "PeriodicOrigin",
    "ScheduleEventView",
    "ScheduleView",
    "delete",
    "durable",
    "events",
    "get",
    "list_schedules",
    "next_runs",
    "origin_of",
    "pause",
    "resume",
    "run_now",
    "sync_declared",
    "upsert",
    "workflow",
    "workflow_factory",
]

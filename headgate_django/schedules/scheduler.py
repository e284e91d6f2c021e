"""One scheduler pass: fire every due tick of every due schedule, in bounded batches.

Run by the ``scheduler`` maintenance duty, so one worker at a time runs it; a second
holder overlapping after a lease lapse is safe too, because a batch's ticks commit under
a compare-and-set of each schedule's ``next_run_at`` (see
:mod:`headgate_django.store.schedules`) and the loser records ``deduplicated`` instead of
enqueuing.

A batch is set-based: one unlocked read of the due schedules, their ticks planned in
Python (once per distinct spec and phase), the workflow factories run, then one
transaction that locks and compares the batch, moves it, inserts every task tick's job in
one statement and every event in another. Its cost per schedule is a few rows written,
not a few transactions.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from headgate_django import metrics
from headgate_django.conf import headgate_settings
from headgate_django.exceptions import HeadgateError
from headgate_django.kernel.schedule_spec import TickPlan, plan_pass
from headgate_django.schedules import targets
from headgate_django.store.schedules import (
    LOST_MOVED,
    Advance,
    DueSchedule,
    EventRow,
    ScheduleRow,
    schedule_advance_many,
    schedule_due,
    schedule_events_record,
    schedule_next_due_in,
)

log = logging.getLogger("headgate_django.schedules")

#: Ticks one schedule fires in one pass at most (an interval far shorter than the grace,
#: after a takeover); the rest wait for the next pass.
TICKS_PER_PASS = 100
#: Batches one pass takes at most, so a pass ends even when schedules keep coming due.
ROUNDS = 20
#: Seconds after which a pass starts no new batch: well inside the duty's lease (10 s at
#: least), which nothing renews while the pass runs, so a long backlog does not make the
#: lease lapse under a live holder. What is left is the next pass's.
BUDGET = 5.0
#: A schedule whose ticks cannot be computed moves nowhere: it is parked.
_PARK = TickPlan(fire=(), skipped=None, next_run_at=None)


@dataclass(frozen=True)
class _Planned:
    row: DueSchedule | ScheduleRow
    plan: TickPlan
    firings: list[targets.Firing]
    parked: str = ""  # why its ticks cannot be planned


_LOST_OUTCOME = {LOST_MOVED: "deduplicated"}


def run_pass(*, using: str = "default") -> dict[str, int]:
    """Fire what is due; the count of each outcome (shown on the duty's admin row)."""
    counts: Counter[str] = Counter()
    batch = headgate_settings.SCHEDULE_BATCH
    lookahead = headgate_settings.SCHEDULE_LOOKAHEAD
    deadline = time.monotonic() + BUDGET
    for _ in range(ROUNDS):
        now, due = schedule_due(limit=batch, lookahead=lookahead, using=using)
        counts.update(fire_batch(due, now, using=using))
        if len(due) < batch or time.monotonic() > deadline:
            break
    return dict(counts)


def wake_in(result: dict[str, Any], *, using: str = "default") -> float | None:
    """Seconds until the scheduler should pass again: when the earliest schedule is due,
    so a tick is enqueued within the worker's heartbeat (50 ms) of its instant instead of
    up to a duty interval later. None (the duty's own interval) when nothing will fire, or
    when something is due now and the pass just made moved nothing: passing again at once
    would find the same, so it must not make the duty spin on every heartbeat. (A
    schedule that cannot be planned does not stay due: the pass parks it.)"""
    due_in = schedule_next_due_in(lookahead=headgate_settings.SCHEDULE_LOOKAHEAD, using=using)
    if due_in is None or (due_in <= 0 and not any(result.values())):
        return None
    return max(due_in, 0.0)


def fire_schedule(row: ScheduleRow, now: datetime, *, using: str = "default") -> Counter[str]:
    """Fire ``row``'s due ticks as of ``now`` (the store clock when it was read)."""
    return fire_batch([row], now, using=using)


def fire_batch(
    rows: Sequence[DueSchedule | ScheduleRow], now: datetime, *, using: str = "default"
) -> Counter[str]:
    """Fire the due ticks of ``rows`` (read at ``now``, the store clock) in one transaction.

    A task schedule's ticks up to ``SCHEDULE_LOOKAHEAD`` ahead fire too: their jobs are
    scheduled for the tick, so what a pass costs is spent before the tick and the job is
    claimable at its instant. Workflow and durable ticks start at their instant.

    A schedule whose ticks cannot be computed (a zone gone from the tz database, a spec
    written by hand) is parked in the same transaction, with an event that says why: left
    due, it would come first in every batch read after it, and enough of them would keep
    every due schedule behind them from firing."""
    counts: Counter[str] = Counter()
    plans: dict[tuple[Any, ...], TickPlan] = {}
    planned: list[_Planned] = []
    grace = headgate_settings.SCHEDULE_GRACE
    ahead = now + headgate_settings.SCHEDULE_LOOKAHEAD
    for row in rows:
        assert row.next_run_at is not None  # schedule_due only returns due schedules
        horizon = ahead if row.target.get("type") == "task" else now
        key = (row.spec, row.timezone, row.next_run_at, row.on_missed, row.backfill_limit, horizon)
        plan = plans.get(key)
        if plan is None:
            try:
                plan = plan_pass(
                    row.parsed,
                    next_run_at=row.next_run_at,
                    now=now,
                    grace=grace,
                    on_missed=row.on_missed,
                    backfill_limit=row.backfill_limit,
                    cap=TICKS_PER_PASS,
                    horizon=horizon,
                )
            except HeadgateError as exc:  # a row written by hand, or by a newer version
                log.error("schedule %s cannot be planned, parking it: %s", row.name, exc)
                planned.append(_Planned(row, _PARK, [], parked=str(exc)))
                continue
            plans[key] = plan
        if not plan.fire and plan.skipped is None and plan.next_run_at == row.next_run_at:
            continue  # not due after all (a workflow schedule within the lookahead)
        firings = [targets.prepare(row.name, row.target, tick) for tick in plan.fire]
        planned.append(_Planned(row, plan, firings))
    if not planned:
        return counts
    by_name = {p.row.name: p for p in planned}
    events: list[EventRow] = []

    def fire(won: list[str]) -> list[EventRow]:
        mine = [by_name[name] for name in won]
        results = iter(targets.write_many([f for p in mine for f in p.firings], using))
        for p in mine:
            if p.parked:
                assert p.row.next_run_at is not None  # due rows have one
                reason = f"cannot be planned: {p.parked}"
                events.append(EventRow(p.row.name, p.row.next_run_at, "parked", reason))
            if p.plan.skipped is not None:
                reason = f"missed ({p.row.on_missed})"
                events.append(EventRow(p.row.name, p.plan.skipped, "skipped", reason))
            for f in p.firings:
                outcome, reason = next(results)
                events.append(EventRow(p.row.name, f.tick_at, outcome, reason, f.target_id))
        return events

    advances = [
        Advance(
            p.row.pk,
            p.row.name,
            expected=p.row.next_run_at,  # type: ignore[arg-type]  # due rows have one
            next_run_at=p.plan.next_run_at,
            starts=any(f.write is not None for f in p.firings),
            definition=(p.row.spec, p.row.timezone, p.row.target),
            revision=p.row.revision,
            parked=p.parked,
        )
        for p in planned
    ]
    why_lost = schedule_advance_many(advances, fire=fire, decided_at=now, using=using)
    # Another pass fired a lost tick, or the schedule went another way (deleted, paused,
    # changed) and nobody did: the event says which.
    lost = [
        EventRow(p.row.name, f.tick_at, _LOST_OUTCOME.get(why, "skipped"), why, f.target_id)
        for p in planned
        if (why := why_lost.get(p.row.name))
        for f in p.firings
    ]
    schedule_events_record(lost, using=using)
    for name, why in why_lost.items():
        if why != LOST_MOVED:  # an overlapping pass is routine; an edit mid-pass is news
            log.info("schedule %s: this pass's ticks for it did not fire: %s", name, why)
    for event in events:
        if event.outcome == "enqueued":
            # A tick written ahead is on time: its job is claimable from its instant.
            metrics.observe_schedule_lag(max((now - event.tick_at).total_seconds(), 0.0))
    counts.update(e.outcome for e in events)
    counts.update(e.outcome for e in lost)
    return counts

"""One scheduler pass: fire every due tick of every due schedule, in bounded batches.

Run by the ``scheduler`` maintenance duty, so one worker at a time runs it; a second
holder overlapping after a lease lapse is safe too, because each schedule's ticks commit
under a compare-and-set of its ``next_run_at`` (see :mod:`headgate_django.store.schedules`)
and the loser records ``deduplicated`` instead of enqueuing.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import datetime

from headgate_django import metrics
from headgate_django.conf import headgate_settings
from headgate_django.exceptions import HeadgateError
from headgate_django.kernel.schedule_spec import plan_pass
from headgate_django.schedules import targets
from headgate_django.store.schedules import (
    EventRow,
    ScheduleRow,
    schedule_advance,
    schedule_due,
    schedule_events_record,
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


def run_pass(*, using: str = "default") -> dict[str, int]:
    """Fire what is due; the count of each outcome (shown on the duty's admin row)."""
    counts: Counter[str] = Counter()
    batch = headgate_settings.SCHEDULE_BATCH
    deadline = time.monotonic() + BUDGET
    for _ in range(ROUNDS):
        now, due = schedule_due(limit=batch, using=using)
        for row in due:
            counts.update(fire_schedule(row, now, using=using))
        if len(due) < batch or time.monotonic() > deadline:
            break
    return dict(counts)


def fire_schedule(row: ScheduleRow, now: datetime, *, using: str = "default") -> Counter[str]:
    """Fire ``row``'s due ticks as of ``now`` (the store clock when it was read)."""
    assert row.next_run_at is not None  # schedule_due only returns due schedules
    try:
        plan = plan_pass(
            row.parsed,
            next_run_at=row.next_run_at,
            now=now,
            grace=headgate_settings.SCHEDULE_GRACE,
            on_missed=row.on_missed,
            backfill_limit=row.backfill_limit,
            cap=TICKS_PER_PASS,
        )
    except HeadgateError as exc:  # a row written by hand, or by a newer version
        log.error("schedule %s cannot be planned: %s", row.name, exc)
        return Counter(unplannable=1)
    firings = [targets.prepare(row.name, row.target, tick) for tick in plan.fire]
    skipped = None
    if plan.skipped is not None:
        skipped = EventRow(row.name, plan.skipped, "skipped", f"missed ({row.on_missed})")

    def fire() -> list[EventRow]:
        events = []
        for firing in firings:
            outcome, reason = targets.write(firing, using)
            events.append(EventRow(row.name, firing.tick_at, outcome, reason, firing.target_id))
        return events

    events = schedule_advance(
        row.name,
        expected=row.next_run_at,
        next_run_at=plan.next_run_at,
        fire=fire,
        decided_at=now,
        starts=any(f.write is not None for f in firings),
        skipped=skipped,
        using=using,
    )
    if events is None:
        lost = [
            EventRow(row.name, f.tick_at, "deduplicated", "fired by another pass", f.target_id)
            for f in firings
        ]
        schedule_events_record(lost, using=using)
        return Counter(deduplicated=len(lost))
    for event in events:
        if event.outcome == "enqueued":
            metrics.observe_schedule_lag((now - event.tick_at).total_seconds())
    return Counter(e.outcome for e in events)

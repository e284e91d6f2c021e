"""The console's schedule list: each schedule's spec in words, its next five fire times in
the viewer's time zone and in UTC, its newest events and whether it is paused or parked
(its ticks cannot be computed, and why).

Cron specs are put into words by ``cron-descriptor`` (24-hour clock; a 6-field spec's
first field is the second, as in our parser); ``@every`` intervals, which cron has no
words for, are described here. Targets are named, never shown: a target holds a payload.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from cron_descriptor import ExpressionDescriptor, FormatException, Options

from headgate_django.console import links
from headgate_django.exceptions import HeadgateError
from headgate_django.kernel.schedule_spec import ScheduleSpec, upcoming
from headgate_django.schedules.targets import target_label
from headgate_django.store.schedules import (
    EventRow,
    ScheduleRow,
    schedule_list,
    schedule_recent_events,
)

PAGE_SIZE = 50
NEXT_RUNS = 5
EVENTS_SHOWN = 5
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
_OPTIONS = Options()
_OPTIONS.use_24hour_time_format = True


def every_in_words(seconds: int) -> str:
    """``@every`` in words: 'Every 30 seconds', 'Every hour', 'Every 1 hour 30 minutes'."""
    parts = []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    if len(parts) == 1 and parts[0].startswith("1 "):
        return f"Every {parts[0][2:]}"
    return "Every " + " ".join(parts)


def describe(spec: ScheduleSpec) -> str:
    """The spec in words, with its time zone (an ``@every`` is aligned to the UTC epoch)."""
    if spec.every is not None:
        return f"{every_in_words(spec.every)}, aligned to the UTC epoch"
    assert spec.cron is not None
    try:
        words = ExpressionDescriptor(spec.cron, _OPTIONS).get_description()
    except (FormatException, ValueError, IndexError, KeyError):
        words = spec.cron  # a form cronsim takes and cron-descriptor does not
    return f"{words} ({spec.tz})"


def _when(instant: datetime | None, zone: ZoneInfo) -> dict[str, str] | None:
    if instant is None:
        return None
    return {
        "iso": instant.isoformat(),
        "utc": instant.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "local": instant.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def _event(e: EventRow, zone: ZoneInfo, link: Callable[[str], str | None]) -> dict[str, Any]:
    return {
        "tick": _when(e.tick_at, zone),
        "outcome": e.outcome,
        "reason": e.reason,
        "target_id": e.target_id,
        "url": link(e.target_id) if e.target_id and e.outcome != "failed" else None,
    }


def _row(
    row: ScheduleRow, events: list[EventRow], zone: ZoneInfo, links: dict[str, Any]
) -> dict[str, Any]:
    target_type, target_name = target_label(row.target)
    why = row.unplannable  # a parked schedule, or one a pass is about to park
    try:
        described = describe(row.parsed)
    except HeadgateError as exc:  # a row written by hand, or by a newer version
        described = f"cannot be read: {exc}"
    runs = [] if why is not None else upcoming(row.parsed, row.next_run_at, NEXT_RUNS)
    link = links.get(target_type, lambda _id: None)
    return {
        "name": row.name,
        "spec": row.spec,
        "described": described,
        "timezone": row.timezone,
        "paused": row.paused,
        "declared": row.declared,
        "on_missed": row.on_missed,
        "plan_error": why,
        "target_type": target_type,
        "target_name": target_name,
        "last_enqueued": _when(row.last_enqueued_at, zone),
        "next_runs": [_when(t, zone) for t in runs],
        "events": [_event(e, zone, link) for e in events],
    }


def schedule_links(site_name: str) -> dict[str, Callable[[str], str | None]]:
    """Where each target type's tick leads: its job, its workflow, its execution."""
    return {
        "task": links.job_url_builder(site_name),
        "workflow": lambda workflow_id: links.workflow_url(workflow_id, site_name),
        "durable": lambda execution_id: links.execution_url(execution_id, site_name),
    }


def schedules_snapshot(
    *, zone: str, after: str | None, links: dict[str, Callable[[str], str | None]]
) -> dict[str, Any]:
    """One page of schedules by name (after the name ``after``), times shown in ``zone``.
    ``links`` maps a target type to the admin URL of what a tick started."""
    tz = ZoneInfo(zone)
    rows = schedule_list(after=after, limit=PAGE_SIZE + 1)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    events = schedule_recent_events([r.name for r in rows], per_schedule=EVENTS_SHOWN)
    return {
        "zone": zone,
        "schedules": [_row(r, events[r.name], tz, links) for r in rows],
        "next_after": rows[-1].name if more and rows else None,
    }

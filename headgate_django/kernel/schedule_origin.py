"""The ids a schedule's ticks get, and reading a tick back from them.

A tick's job id (and a workflow target's workflow id, a durable target's business key) is
``sched:<schedule>:<tick in epoch milliseconds>``: a function of (schedule, tick) alone,
so however many scheduler passes reach the same tick, the store keeps one job for it.
The handler's ``ctx.periodic_origin`` is read back from that id, which keeps the origin
off the insert path entirely (no column, no write for jobs that are not scheduled).
A manual run (``run_now``) appends ``+<unique suffix>`` so it never collides with a tick.
The prefix is reserved: callers cannot take these ids (``kernel.names.check_not_reserved``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from headgate_django.kernel.names import SCHEDULE_ID_PREFIX as PREFIX
from headgate_django.kernel.schedule_spec import EPOCH


@dataclass(frozen=True)
class PeriodicOrigin:
    """Which schedule and tick a job was enqueued for; ``tick_at`` is aware UTC."""

    schedule: str
    tick_at: datetime


def tick_id(schedule: str, tick_at: datetime, suffix: str = "") -> str:
    ms = (tick_at - EPOCH) // timedelta(milliseconds=1)
    return f"{PREFIX}{schedule}:{ms}" + (f"+{suffix}" if suffix else "")


def origin_of(identifier: str | None) -> PeriodicOrigin | None:
    """The origin encoded in a tick id, None for any other id."""
    if not identifier or not identifier.startswith(PREFIX):
        return None
    name, _, tail = identifier[len(PREFIX) :].rpartition(":")
    ms = tail.partition("+")[0]
    if not name or not ms.isdigit():
        return None
    return PeriodicOrigin(name, (EPOCH + timedelta(milliseconds=int(ms))).astimezone(UTC))

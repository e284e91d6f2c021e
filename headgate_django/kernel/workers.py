"""Whether a registered worker is live, gone or stopped: arithmetic on its heartbeat.

A worker upserts its registry row every heartbeat interval (``HEADGATE["WORKER_HEARTBEAT"]``)
and stamps it stopped on a clean exit. One that misses :data:`GONE_AFTER_BEATS` beats in a
row died without saying so (SIGKILL, a lost host, a partition): it is *gone*. Three
beats, not one, so that a beat delayed by a slow database or a busy heartbeat thread does
not flap the page. Every instant is the store's clock, so hosts' clocks never matter.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

#: Missed heartbeats after which a worker that did not stop cleanly counts as gone.
GONE_AFTER_BEATS = 3

LIVE = "live"
GONE = "gone"
STOPPED = "stopped"
STATUSES = (LIVE, GONE, STOPPED)


def worker_status(
    *, now: datetime, last_heartbeat_at: datetime, heartbeat: timedelta, stopped: bool
) -> str:
    """``stopped`` after a clean exit, ``gone`` once ``GONE_AFTER_BEATS`` beats are missed,
    else ``live``."""
    if stopped:
        return STOPPED
    return GONE if now - last_heartbeat_at > heartbeat * GONE_AFTER_BEATS else LIVE


def serves_queue(queues: Iterable[str] | None, queue: str) -> bool:
    """Whether a worker started with ``queues`` (``None``: every queue, as ``runworkers``
    with no ``--queue``) claims jobs of ``queue``."""
    return queues is None or queue in queues


def minute_series(
    rows: dict[int, tuple[int, int, int]], *, last_minute: int, minutes: int
) -> list[tuple[int, int, int, int]]:
    """``minutes`` consecutive ``(minute, completed, failed, retried)`` ending at
    ``last_minute``, with zeros for minutes no worker recorded anything in."""
    first = last_minute - minutes + 1
    return [(m, *rows.get(m, (0, 0, 0))) for m in range(first, last_minute + 1)]

"""Read-only aggregates for dashboards and the API, bounded whatever the table's size.

No query here reads every row of ``headgate_job``. A count by state reads at most
:data:`~headgate_django.store.estimates.EXACT_UP_TO` + 1 index entries and is the
planner's estimate beyond that (labelled so); a per-queue breakdown of a state is a
``GROUP BY`` only when the state's rows are known to be that few, and otherwise one
estimate per known queue. Rates read key ranges: arrivals the id range of the last
minute's ULIDs, completions the eviction index.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.envelope import id_prefix
from headgate_django.kernel.states import State
from headgate_django.models import DutyLease, Job, QueueState
from headgate_django.store import vendor as v
from headgate_django.store.estimates import Count, capped_count, planner_rows
from headgate_django.store.vendor import db_now

STATES = [s.value for s in State if s is not State.DELETED]


@dataclass
class QueueOverview:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_available_age_s: float | None = None
    arrivals_last_minute: int = 0
    completions_last_minute: int = 0
    paused: bool = False
    #: States whose count is the planner's estimate, not a count.
    estimated: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def switched_queues(using: str = "default") -> list[str]:
    """Queues an operator has paused or resumed (a small table of switches)."""
    return list(QueueState.objects.using(using).order_by("name").values_list("name", flat=True))


def job_counts(*, queue: str | None = None, using: str = "default") -> dict[str, Count]:
    """Jobs per state (every state, 0 for empty ones), of one queue or of all."""
    conn = v.connection_for(using)
    counts = {}
    for state in STATES:
        total = capped_count(conn, "state = %s", [state])
        where, params = "state = %s AND queue = %s", [state, queue]
        if queue is None:
            counts[state] = total
        elif total.estimated and state == State.COMPLETED.value:
            # No (state, queue) index holds completed jobs (it would cost every ack an
            # entry): counting one queue's of millions could read them all.
            counts[state] = Count(planner_rows(conn, where, params), estimated=True)
        else:
            counts[state] = capped_count(conn, where, params)
    return counts


def queue_overview(using: str = "default", known_queues: Iterable[str] = ()) -> list[QueueOverview]:
    """Per queue: jobs by state, oldest available age, last-minute arrivals and completions.

    ``known_queues`` (the registered kinds' queues) are listed even when a state with more
    rows than can be grouped cheaply is the only place they appear.
    """
    return queue_overview_page(using=using, known_queues=known_queues).queues


@dataclass
class QueuePage:
    queues: list[QueueOverview]
    #: How many queues come after the page's last one.
    more: int


def queue_overview_page(
    *,
    after: str | None = None,
    limit: int | None = None,
    using: str = "default",
    known_queues: Iterable[str] = (),
) -> QueuePage:
    """:func:`queue_overview` of the ``limit`` queues named after ``after``, by name.

    The queues' names and most of their numbers come from a few grouped reads whose size
    the caps bound, whatever the number of queues; what is read one queue at a time (the
    estimate of a state too crowded to group, the oldest available job) is read for the
    page's queues only. With thousands of queue names that was thousands of queries for
    every dashboard poll."""
    conn = v.connection_for(using)
    queues: dict[str, QueueOverview] = {name: QueueOverview(name) for name in known_queues}
    for switch in QueueState.objects.using(using).all():
        queues.setdefault(switch.name, QueueOverview(switch.name)).paused = switch.paused
    crowded = [s for s in STATES if not _group_by_queue(conn, s, queues)]
    # Estimated: the queues named so far (known, switched, or in a state grouped above);
    # not one that only the last minute's rates name (a burst of new queue names in a
    # crowded state would cost an estimate each, as it never did).
    estimated = set(queues)
    now = db_now(using)
    _rates(conn, now, queues)
    names = sorted(name for name in queues if after is None or name > after)
    shown = names if limit is None else names[:limit]
    page = {name: queues[name] for name in shown}
    for state in crowded:
        for q in page.values():
            if q.name not in estimated:
                continue
            n = planner_rows(conn, "state = %s AND queue = %s", [state, q.name])
            if n:
                q.counts[state] = n
                q.estimated.append(state)
    _oldest_available(conn, now, page)
    return QueuePage(list(page.values()), len(names) - len(shown))


def _group_by_queue(conn: Any, state: str, queues: dict[str, QueueOverview]) -> bool:
    """Count ``state`` by queue if it has few rows; ``False`` if it has too many."""
    if capped_count(conn, "state = %s", [state]).estimated:
        return False
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT queue, COUNT(*) FROM headgate_job WHERE state = %s GROUP BY queue", [state]
        )
        for name, n in cursor.fetchall():
            queues.setdefault(name, QueueOverview(name)).counts[state] = int(n)
    return True


def _oldest_available(conn: Any, now: datetime, queues: dict[str, QueueOverview]) -> None:
    """The oldest available job's age per queue, read from the head of its claim index
    (the next job a claim would take: the oldest one of the queue's highest priority)."""
    with conn.cursor() as cursor:
        for q in queues.values():
            if not q.counts.get(State.AVAILABLE.value):
                continue
            cursor.execute(
                "SELECT scheduled_at FROM headgate_job WHERE state = %s AND queue = %s "
                "ORDER BY priority DESC, scheduled_at, id LIMIT 1",
                [State.AVAILABLE.value, q.name],
            )
            row = cursor.fetchone()
            if row is not None:
                q.oldest_available_age_s = _age(now, v.parse_instant(conn, row[0]))


def _rates(conn: Any, now: datetime, queues: dict[str, QueueOverview]) -> None:
    """Arrivals and completions of the last minute, by queue.

    Arrivals are jobs whose generated id (a ULID) dates from the last minute, a range of
    the primary key; jobs enqueued with ids of the caller's choosing are not counted.
    Completions are read through the eviction index: a job of retention *r* completed in
    the last minute expires between a minute ago and now, plus *r*. One such range per
    default retention (``RETENTION``, ``WORKFLOW_RETENTION``) reads the last minute's
    completions of those jobs and nothing else; jobs given a retention of their own are
    not counted. A single range from the shortest retention up read every completed job
    kept longer (a task's ``retention=30 days``: each of them, on every dashboard load and
    metrics scrape, for 30 days).
    """
    minute_ago = now - timedelta(minutes=1)
    instant = conn.ops.adapt_datetimefield_value
    since_ms = int(minute_ago.timestamp() * 1000)
    until_ms = int((now + timedelta(minutes=1)).timestamp() * 1000)
    retentions = sorted({headgate_settings.RETENTION, headgate_settings.WORKFLOW_RETENTION})
    ranges = " OR ".join(["(expires_at >= %s AND expires_at <= %s)"] * len(retentions))
    bounds = [instant(at + r) for r in retentions for at in (minute_ago, now)]
    queries = (
        (
            "arrivals_last_minute",
            "",
            "id >= %s AND id < %s AND enqueued_at >= %s",
            [id_prefix(since_ms), id_prefix(until_ms), instant(minute_ago)],
        ),
        (
            "completions_last_minute",
            v.mysql_index_hint(conn, "headgate_job_evict_my"),
            f"state = %s AND ({ranges}) AND finalized_at >= %s",
            [State.COMPLETED.value, *bounds, instant(minute_ago)],
        ),
    )
    with conn.cursor() as cursor:
        for attribute, hint, where, params in queries:
            cursor.execute(
                f"SELECT queue, COUNT(*) FROM headgate_job{hint} WHERE {where} GROUP BY queue",
                params,
            )
            for name, n in cursor.fetchall():
                setattr(queues.setdefault(name, QueueOverview(name)), attribute, int(n))


@dataclass
class EvictionStatus:
    backlog: int
    backlog_estimated: bool
    rows_per_second: float | None
    last_run_at: datetime | None


def eviction_status(using: str = "default") -> EvictionStatus:
    """The eviction backlog (rows past retention) and what the last eviction pass did."""
    from headgate_django.store.maintenance import job_eviction_backlog

    backlog = job_eviction_backlog(using=using)
    duty = DutyLease.objects.using(using).filter(pk="evict").first()
    result = duty.last_result if duty is not None else {}
    return EvictionStatus(
        backlog=backlog.n,
        backlog_estimated=backlog.estimated,
        rows_per_second=result.get("rows_per_second"),
        last_run_at=duty.last_run_at if duty is not None else None,
    )


def queue_is_known(name: str, using: str = "default") -> bool:
    """Whether anything uses ``name``: a job in any state, or a switch set before."""
    return (
        QueueState.objects.using(using).filter(name=name).exists()
        or Job.objects.using(using).filter(queue=name).exists()
    )


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds())

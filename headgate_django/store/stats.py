"""Read-only aggregates for dashboards and the API: bounded GROUP BY queries, no payloads."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q

from headgate_django.kernel.states import State
from headgate_django.models import Job, QueueState
from headgate_django.store.vendor import db_now


@dataclass
class QueueOverview:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_available_age_s: float | None = None
    arrivals_last_minute: int = 0
    completions_last_minute: int = 0
    paused: bool = False

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def queue_overview(using: str = "default") -> list[QueueOverview]:
    now = db_now(using)
    minute_ago = now - timedelta(minutes=1)
    queues: dict[str, QueueOverview] = {}
    jobs = Job.objects.using(using)
    for row in jobs.values("queue", "state").annotate(n=Count("id")).order_by():
        queues.setdefault(row["queue"], QueueOverview(row["queue"])).counts[row["state"]] = row["n"]
    for activity in (
        jobs.values("queue")
        .annotate(
            oldest=Min("scheduled_at", filter=Q(state=State.AVAILABLE.value)),
            arrivals=Count("id", filter=Q(enqueued_at__gte=minute_ago)),
            completions=Count(
                "id", filter=Q(state=State.COMPLETED.value, finalized_at__gte=minute_ago)
            ),
        )
        .order_by()
    ):
        q = queues.setdefault(activity["queue"], QueueOverview(activity["queue"]))
        q.oldest_available_age_s = _age(now, activity["oldest"])
        q.arrivals_last_minute = activity["arrivals"]
        q.completions_last_minute = activity["completions"]
    for state in QueueState.objects.using(using).all():
        queues.setdefault(state.name, QueueOverview(state.name)).paused = state.paused
    return [queues[name] for name in sorted(queues)]


def queue_is_known(name: str, using: str = "default") -> bool:
    """Whether anything uses ``name``: a job in any state, or a switch set before."""
    return (
        QueueState.objects.using(using).filter(name=name).exists()
        or Job.objects.using(using).filter(queue=name).exists()
    )


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds())

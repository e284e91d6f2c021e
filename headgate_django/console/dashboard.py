"""What the overview dashboard and the workers page show, as plain data, and their HTML.

Both pages are drawn from one template fragment each; the first render embeds it and the
live socket (:class:`headgate_django.console.consumers.OverviewConsumer`) sends the same
fragment again whenever the data behind it changed, so a page never draws differently
live than on load. Every read is bounded: the per-queue counts are
:func:`headgate_django.store.stats.queue_overview` (capped counts and planner estimates),
the per-minute series a range of the small ``headgate_queue_minute`` table, the workers
the registry. No read here counts rows of ``headgate_job`` beyond those caps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from django.template.loader import render_to_string

from headgate_django.console import links
from headgate_django.console.chart import minute_chart
from headgate_django.kernel.states import State
from headgate_django.kernel.workers import LIVE, serves_queue
from headgate_django.registry import registered_queues
from headgate_django.store.stats import queue_overview_page
from headgate_django.store.workers import queue_minutes, worker_list

STATES = [s.value for s in State if s is not State.DELETED]
#: The chart's span, and the states whose list is "behind" each per-minute series.
MINUTES = 60
_SERIES_STATE = {"completed": "completed", "failed": "archived", "retried": "retryable"}
#: Queues the overview draws, the first by name; it says how many more there are. Each
#: costs the page's every poll a query or two and a chart, and the fragment sent again on
#: every change grows with them: 3,000 queues were up to 3 s and 4.7 MB a poll.
OVERVIEW_QUEUES = 100


def _list_url(site_name: str) -> Callable[..., str]:
    base = links.admin_url("headgate_django_job_changelist", site_name=site_name) or ""

    def url(**filters: str) -> str:
        return f"{base}?{urlencode(filters)}"

    return url


def overview_data(*, site_name: str = "admin", show_workers: bool = True) -> dict[str, Any]:
    """Per queue: depth by state, oldest available age, the hour's per-minute outcomes as a
    chart, and the jobs each live worker holds of it; every number with its list's URL. The
    first :data:`OVERVIEW_QUEUES` queues by name, and how many ``more`` there are."""
    jobs = _list_url(site_name)
    _, series = queue_minutes(minutes=MINUTES)
    workers = [w for w in worker_list() if w.status == LIVE] if show_workers else []
    page = queue_overview_page(limit=OVERVIEW_QUEUES, known_queues={*registered_queues(), *series})
    queues = []
    for q in page.queues:
        name = q.name
        rows = series.get(name) or []
        totals = {
            word: sum(r[i] for r in rows)
            for i, word in ((1, "completed"), (2, "failed"), (3, "retried"))
        }
        last = rows[-1] if rows else (0, 0, 0, 0)
        queues.append(
            {
                "name": name,
                "url": jobs(queue__exact=name),
                "paused": q.paused,
                "unserved": show_workers
                and not q.paused
                and bool(q.counts.get("available"))
                and not any(serves_queue(w.queues, name) for w in workers),
                "states": [
                    {
                        "state": s,
                        "n": q.counts.get(s, 0),
                        "estimated": s in q.estimated,
                        "url": jobs(queue__exact=name, state__exact=s),
                    }
                    for s in STATES
                ],
                "oldest_available_age_s": q.oldest_available_age_s,
                "available_url": jobs(queue__exact=name, state__exact="available"),
                "hour": [
                    {
                        "series": word,
                        "n": totals[word],
                        "last_minute": last[i],
                        "url": jobs(queue__exact=name, state__exact=_SERIES_STATE[word]),
                    }
                    for i, word in ((1, "completed"), (2, "failed"), (3, "retried"))
                ],
                "chart": minute_chart(name, rows or [(0, 0, 0, 0)] * MINUTES),
                "workers": [
                    {
                        "id": w.id,
                        "n": w.in_flight_by_queue[name],
                        "url": jobs(
                            queue__exact=name, state__exact="running", claimed_by__exact=w.id
                        ),
                    }
                    for w in workers
                    if w.in_flight_by_queue.get(name)
                ],
            }
        )
    return {"queues": queues, "more": page.more, "show_workers": show_workers}


def workers_data() -> dict[str, Any]:
    """Every registered worker, live ones first, then gone, then stopped, each by id."""
    order = {"live": 0, "gone": 1, "stopped": 2}
    rows = sorted(worker_list(), key=lambda w: (order[w.status], w.id))
    return {
        "workers": [
            {**asdict(w), "queues_text": ", ".join(w.queues) if w.queues else "every queue"}
            for w in rows
        ],
        "counts": {s: sum(1 for w in rows if w.status == s) for s in order},
    }


def overview_html(data: dict[str, Any]) -> str:
    return render_to_string("headgate_django/console/_overview.html", data)


def workers_html(data: dict[str, Any]) -> str:
    return render_to_string("headgate_django/console/_workers.html", data)

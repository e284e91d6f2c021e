"""Prometheus metrics (optional: ``pip install "headgate-django[metrics]"``).

Counters and the attempt-duration histogram are updated by the worker process that runs
the jobs; queue depth and oldest available age are read from the store when scraped, so
every process reports the same truth. Expose them with :func:`metrics_view` in your URLs
(guard it like any internal endpoint) or ``runworkers --metrics-port``.

Attempt outcomes and durations, counted once per job, are tallied under one lock and
turned into metric families at scrape time (:class:`_AttemptTally`): prometheus_client's
labelled children took three locks and a dozen Python calls per job, a measurable share
of a no-op job's cost in the worker.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator
from typing import Any

try:
    import prometheus_client
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.utils import floatToGoString
except ImportError:  # metrics are optional
    prometheus_client = None  # type: ignore[assignment]

_LABELS = ("queue", "kind")
log = logging.getLogger(__name__)


class _Children:
    """A labelled metric's children, looked up once per label values.

    ``labels()`` validates its arguments and takes the metric's lock on every call, which
    cost more than the rest of a no-op job's bookkeeping together. prometheus_client hands
    out one child per label values, so a child cached here is the one it would return; two
    threads racing to fill the same key store the same object.
    """

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class _Metrics:
    def __init__(self) -> None:
        assert prometheus_client is not None
        c = prometheus_client
        self.claimed = _Children(c.Counter("headgate_jobs_claimed_total", "Jobs claimed", _LABELS))
        self.attempts = _AttemptTally()
        c.REGISTRY.register(self.attempts)
        self.workflows = c.Counter(
            "headgate_workflow_outcomes_total", "Workflows finished", ("outcome",)
        )
        self.durable = c.Counter(
            "headgate_durable_outcomes_total", "Durable executions finished", ("outcome",)
        )
        self.evicted = c.Counter(
            "headgate_jobs_evicted_total", "Jobs deleted by retention eviction", ("state",)
        )
        self.eviction_rate = c.Gauge(
            "headgate_eviction_rows_per_second", "Delete rate of the last eviction pass"
        )
        self.schedule_lag = c.Histogram(
            "headgate_schedule_lag_seconds",
            "Scheduler lag: the pass's store-clock now minus the tick it enqueued",
            buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
        )
        c.REGISTRY.register(_StoreCollector())


#: The duration buckets' upper bounds in seconds, prometheus_client's defaults; a +Inf
#: bucket follows them.
_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class _AttemptTally:
    """``headgate_jobs_outcomes_total`` and ``headgate_job_attempt_duration_seconds``.

    A collector: each attempt adds to plain counts under one lock, and a scrape turns them
    into a counter and a histogram family (cumulative buckets, as the exposition wants).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[tuple[str, str, str], int] = {}
        # (queue, kind) → [count per bucket, +Inf's last; then the sum of the seconds]
        self._durations: dict[tuple[str, str], list[float]] = {}

    def observe(self, queue: str, kind: str, outcome: str, seconds: float) -> None:
        bucket = bisect_left(_BOUNDS, seconds)
        with self._lock:
            key = (queue, kind, outcome)
            self._outcomes[key] = self._outcomes.get(key, 0) + 1
            row = self._durations.get((queue, kind))
            if row is None:
                row = self._durations[(queue, kind)] = [0.0] * (len(_BOUNDS) + 2)
            row[bucket] += 1
            row[-1] += seconds

    def describe(self) -> Iterator[Any]:
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        outcomes, durations = self._families()
        with self._lock:
            counts = list(self._outcomes.items())
            rows = [(labels, list(row)) for labels, row in self._durations.items()]
        for outcome_labels, count in counts:
            outcomes.add_metric(list(outcome_labels), count)
        for labels, row in rows:
            cumulative, buckets = 0.0, []
            for bound, in_bucket in zip((*_BOUNDS, float("inf")), row[:-1], strict=True):
                cumulative += in_bucket
                buckets.append((floatToGoString(bound), cumulative))
            durations.add_metric(list(labels), buckets, row[-1])
        yield outcomes
        yield durations

    @staticmethod
    def _families() -> tuple[Any, Any]:
        outcomes = CounterMetricFamily(
            "headgate_jobs_outcomes",
            "Attempt outcomes (succeeded, failed, snoozed, skipped, revoked, undecodable, lost)",
            labels=[*_LABELS, "outcome"],
        )
        durations = HistogramMetricFamily(
            "headgate_job_attempt_duration_seconds",
            "Handler run time per attempt",
            labels=list(_LABELS),
        )
        return outcomes, durations


class _StoreCollector:
    """Queue depth by state, oldest available age and the eviction backlog, read from the
    store at scrape.

    The per-queue families cover the first ``METRICS_MAX_QUEUES`` queues by name, and
    ``headgate_queues_omitted`` says how many more there are. What a queue costs is read
    one queue at a time (a crowded state's estimate, the oldest available job), so with
    every queue a project with thousands of queue names paid thousands of queries per
    scrape, and Prometheus a series per queue and state. By name, not the busiest: which
    queues are busiest is what costs a query each to find out, and a set that follows
    the load would start and end series from one scrape to the next."""

    def describe(self) -> Iterator[Any]:
        """The families without samples. Registration asks for the names this way; without
        it prometheus_client would call ``collect()``, a store query, inside the worker's
        first claim, and a database outage at that moment would take the worker down."""
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        from django.db import DatabaseError, connection

        from headgate_django.conf import headgate_settings
        from headgate_django.store.maintenance import job_eviction_backlog
        from headgate_django.store.stats import queue_overview_page

        depth, oldest, omitted, backlog = self._families()
        try:
            page = queue_overview_page(limit=headgate_settings.METRICS_MAX_QUEUES)
            expired = job_eviction_backlog()
        except DatabaseError as exc:
            # The scrape still serves this process's counters; the next one reconnects.
            log.warning("metrics: could not read queue depths (%s)", exc)
            connection.close()
            return
        for queue in page.queues:
            for state, count in queue.counts.items():
                depth.add_metric([queue.name, state], count)
            if queue.oldest_available_age_s is not None:
                oldest.add_metric([queue.name], queue.oldest_available_age_s)
        omitted.add_metric([], page.more)
        backlog.add_metric([], expired.n)
        yield depth
        yield oldest
        yield omitted
        yield backlog

    @staticmethod
    def _families() -> tuple[Any, Any, Any, Any]:
        depth = GaugeMetricFamily(
            "headgate_queue_jobs", "Jobs by queue and state", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "headgate_queue_oldest_available_seconds",
            "Age of the oldest available job",
            labels=["queue"],
        )
        omitted = GaugeMetricFamily(
            "headgate_queues_omitted",
            "Queues past METRICS_MAX_QUEUES (by name) left out of the per-queue families",
        )
        backlog = GaugeMetricFamily(
            "headgate_eviction_backlog",
            "Jobs past their retention not yet evicted (estimated above 1,000)",
        )
        return depth, oldest, omitted, backlog


_instance: _Metrics | None = None
_instance_lock = threading.Lock()


def metrics() -> _Metrics | None:
    """The process's metrics, or ``None`` when prometheus_client is not installed.

    Made once, under a lock: a worker's claim loop, duty thread and handler threads all
    get here first at about the same moment, and a second set would be refused by the
    registry (``DuplicateTimeseries``) in whichever thread lost the race."""
    global _instance
    if prometheus_client is None:
        return None
    if _instance is None:
        with _instance_lock:
            if _instance is None:
                _instance = _Metrics()
    return _instance


def observe_attempt(queue: str, kind: str, outcome: str, seconds: float) -> None:
    m = metrics()
    if m is not None:
        m.attempts.observe(queue, kind, outcome, seconds)


def observe_claims(jobs: Any) -> None:
    m = metrics()
    if m is not None:
        for labels, n in Counter((job.queue, job.kind) for job in jobs).items():
            m.claimed(*labels).inc(n)


def observe_eviction(evicted: dict[str, int], rows_per_second: float) -> None:
    m = metrics()
    if m is not None:
        for state, n in evicted.items():
            m.evicted.labels(state).inc(n)
        if evicted:
            m.eviction_rate.set(rows_per_second)


def observe_workflow(outcome: str) -> None:
    m = metrics()
    if m is not None:
        m.workflows.labels(outcome).inc()


def observe_durable(outcome: str) -> None:
    m = metrics()
    if m is not None:
        m.durable.labels(outcome).inc()


def observe_schedule_lag(seconds: float) -> None:
    m = metrics()
    if m is not None:
        m.schedule_lag.observe(seconds)


def metrics_view(request: Any) -> Any:
    """The Prometheus text exposition, for ``path("metrics", metrics_view)``."""
    from django.http import HttpResponse

    if metrics() is None:
        return HttpResponse(
            "prometheus_client is not installed\n", status=501, content_type="text/plain"
        )
    return HttpResponse(
        prometheus_client.generate_latest(), content_type=prometheus_client.CONTENT_TYPE_LATEST
    )


def serve(port: int) -> None:
    """Start the exposition HTTP server on 127.0.0.1:``port`` (``runworkers --metrics-port``)."""
    if metrics() is None:
        from headgate_django.exceptions import ConfigurationError

        # runworkers names the option in front of this message.
        raise ConfigurationError("needs prometheus_client (pip install prometheus-client)")
    prometheus_client.start_http_server(port, addr="127.0.0.1")

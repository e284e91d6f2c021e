"""Prometheus metrics (optional: ``pip install "headgate-django[metrics]"``).

Counters and the attempt-duration histogram are updated by the worker process that runs
the jobs; queue depth and oldest available age are read from the store when scraped, so
every process reports the same truth. Expose them with :func:`metrics_view` in your URLs
(guard it like any internal endpoint) or ``runworkers --metrics-port``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

try:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
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
        self.outcomes = _Children(
            c.Counter(
                "headgate_jobs_outcomes_total",
                "Attempt outcomes (completed, retried, archived, snoozed, skipped, undecodable, "
                "lost)",
                (*_LABELS, "outcome"),
            )
        )
        self.duration = _Children(
            c.Histogram(
                "headgate_job_attempt_duration_seconds", "Handler run time per attempt", _LABELS
            )
        )
        self.workflows = c.Counter(
            "headgate_workflow_outcomes_total", "Workflows finished", ("outcome",)
        )
        self.durable = c.Counter(
            "headgate_durable_outcomes_total", "Durable executions finished", ("outcome",)
        )
        c.REGISTRY.register(_StoreCollector())


class _StoreCollector:
    """Queue depth by state and oldest available age, read from the store at scrape."""

    def describe(self) -> Iterator[Any]:
        """The families without samples. Registration asks for the names this way; without
        it prometheus_client would call ``collect()``, a store query, inside the worker's
        first claim, and a database outage at that moment would take the worker down."""
        yield from self._families()

    def collect(self) -> Iterator[Any]:
        from django.db import DatabaseError, connection

        from headgate_django.store.stats import queue_overview

        depth, oldest = self._families()
        try:
            queues = queue_overview()
        except DatabaseError as exc:
            # The scrape still serves this process's counters; the next one reconnects.
            log.warning("metrics: could not read queue depths (%s)", exc)
            connection.close()
            return
        for queue in queues:
            for state, count in queue.counts.items():
                depth.add_metric([queue.name, state], count)
            if queue.oldest_available_age_s is not None:
                oldest.add_metric([queue.name], queue.oldest_available_age_s)
        yield depth
        yield oldest

    @staticmethod
    def _families() -> tuple[Any, Any]:
        depth = GaugeMetricFamily(
            "headgate_queue_jobs", "Jobs by queue and state", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "headgate_queue_oldest_available_seconds",
            "Age of the oldest available job",
            labels=["queue"],
        )
        return depth, oldest


_instance: _Metrics | None = None


def metrics() -> _Metrics | None:
    """The process's metrics, or ``None`` when prometheus_client is not installed."""
    global _instance
    if prometheus_client is None:
        return None
    if _instance is None:
        _instance = _Metrics()
    return _instance


def observe_attempt(queue: str, kind: str, outcome: str, seconds: float) -> None:
    m = metrics()
    if m is not None:
        m.outcomes(queue, kind, outcome).inc()
        m.duration(queue, kind).observe(seconds)


def observe_claims(jobs: Any) -> None:
    m = metrics()
    if m is not None:
        for labels, n in Counter((job.queue, job.kind) for job in jobs).items():
            m.claimed(*labels).inc(n)


def observe_workflow(outcome: str) -> None:
    m = metrics()
    if m is not None:
        m.workflows.labels(outcome).inc()


def observe_durable(outcome: str) -> None:
    m = metrics()
    if m is not None:
        m.durable.labels(outcome).inc()


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

        raise ConfigurationError(
            "--metrics-port needs prometheus_client (pip install prometheus-client)"
        )
    prometheus_client.start_http_server(port, addr="127.0.0.1")

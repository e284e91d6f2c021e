from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.test import RequestFactory, override_settings

from headgate_django import enqueue
from headgate_django import metrics as m
from headgate_django.store.estimates import EXACT_UP_TO
from tests.app import tasks
from tests.conftest import fresh_python

HOUR = timedelta(hours=1)


@pytest.mark.django_db
def test_metrics_view_reports_counters_and_queue_depth():
    m.observe_attempt("default", "test.echo", "completed", 0.01)
    tasks.echo.enqueue(value=1)
    response = m.metrics_view(RequestFactory().get("/metrics"))
    body = response.content.decode()
    assert response.status_code == 200
    assert (
        'headgate_jobs_outcomes_total{kind="test.echo",outcome="completed",queue="default"}' in body
    )
    assert 'headgate_queue_jobs{queue="default",state="available"} 1.0' in body
    assert "headgate_queue_oldest_available_seconds" in body


@pytest.mark.django_db(transaction=True)
def test_worker_counts_claims_and_outcomes():
    from prometheus_client import REGISTRY

    from headgate_django.worker.runner import Worker

    before = (
        REGISTRY.get_sample_value(
            "headgate_jobs_outcomes_total",
            {"queue": "default", "kind": "test.noop", "outcome": "succeeded"},
        )
        or 0.0
    )
    tasks.noop.enqueue()
    Worker(burst=True, concurrency=2, run_duties=False).run()
    after = REGISTRY.get_sample_value(
        "headgate_jobs_outcomes_total",
        {"queue": "default", "kind": "test.noop", "outcome": "succeeded"},
    )
    assert after == before + 1
    assert (
        REGISTRY.get_sample_value(
            "headgate_jobs_claimed_total", {"queue": "default", "kind": "test.noop"}
        )
        >= 1
    )


@pytest.mark.django_db
def test_workflow_outcomes_are_counted():
    from prometheus_client import REGISTRY

    from headgate_django import enqueue, testing
    from headgate_django.workflows import Workflow

    def count():
        return (
            REGISTRY.get_sample_value("headgate_workflow_outcomes_total", {"outcome": "succeeded"})
            or 0.0
        )

    before = count()
    enqueue(Workflow("metrics-wf").add("a", tasks.noop.envelope(), []).prepare())
    testing.run_jobs()
    assert count() == before + 1


@pytest.mark.django_db
def test_registering_the_store_collector_reads_nothing(django_assert_num_queries):
    """Registration asks for the metric names; the store is read only at scrape time, so a
    worker's first claim (which registers it) cannot fail on a database outage."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)  # as prometheus_client.REGISTRY
    with django_assert_num_queries(0):
        registry.register(m._StoreCollector())
    tasks.echo.enqueue(value=1)
    assert (
        registry.get_sample_value("headgate_queue_jobs", {"queue": "default", "state": "available"})
        == 1.0
    )


@pytest.mark.django_db
@override_settings(HEADGATE={"METRICS_MAX_QUEUES": 5})
def test_a_scrape_reads_a_bounded_number_of_queues_and_counts_the_rest():
    """Each queue a scrape reports costs queries of its own (its oldest available job and,
    for a state too crowded to group, an estimate): with every queue, thousands of queue
    names were thousands of queries per scrape. The first ``METRICS_MAX_QUEUES`` by name
    are reported, and a gauge counts the rest."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def add_queues(names: range) -> None:
        # One job waiting in each (a state grouped by queue, so every queue is named),
        # and one available: more than EXACT_UP_TO available jobs make that state too
        # crowded to group on PostgreSQL and MariaDB, so each queue shown is estimated.
        waiting = [replace(tasks.noop.envelope(), queue=f"q{i:03}", delay=HOUR) for i in names]
        ready = [replace(tasks.noop.envelope(), queue=f"q{i:03}") for i in names]
        enqueue(waiting + ready)

    def scrape() -> tuple[int, dict[str, Any]]:
        with CaptureQueriesContext(connection) as queries:
            families = {f.name: f for f in m._StoreCollector().collect()}
        return len(queries), families

    base, _ = scrape()  # no queue at all: what every scrape reads whatever the queues
    add_queues(range(20))
    enqueue([replace(tasks.noop.envelope(), queue="q000")] * EXACT_UP_TO)
    cost, _ = scrape()
    assert cost <= base + 2 * 5  # an estimate and an oldest job per queue shown
    add_queues(range(20, 60))
    cost_after, families = scrape()
    assert cost_after == cost  # forty more queues, not one query more
    shown = {s.labels["queue"] for s in families["headgate_queue_jobs"].samples}
    assert shown == {"q000", "q001", "q002", "q003", "q004"}
    (omitted,) = families["headgate_queues_omitted"].samples
    assert omitted.value == 55


def test_attempt_durations_are_a_cumulative_histogram():
    """Each attempt lands in the first bucket whose bound it does not exceed (``le``), and
    every bucket counts the attempts below it, as prometheus_client's Histogram does."""
    from prometheus_client import CollectorRegistry

    tally = m._AttemptTally()
    registry = CollectorRegistry()
    registry.register(tally)
    for seconds in (0.001, 0.005, 0.02, 3.0, 20.0):
        tally.observe("q", "k", "succeeded", seconds)
    tally.observe("q", "k", "failed", 0.1)

    def bucket(le):
        return registry.get_sample_value(
            "headgate_job_attempt_duration_seconds_bucket", {"queue": "q", "kind": "k", "le": le}
        )

    assert [bucket(le) for le in ("0.005", "0.01", "0.025", "0.1", "2.5", "5.0", "+Inf")] == [
        2.0, 2.0, 3.0, 4.0, 4.0, 5.0, 6.0
    ]  # fmt: skip
    labels = {"queue": "q", "kind": "k"}
    assert registry.get_sample_value("headgate_job_attempt_duration_seconds_count", labels) == 6
    assert registry.get_sample_value(
        "headgate_job_attempt_duration_seconds_sum", labels
    ) == pytest.approx(23.126)
    assert (
        registry.get_sample_value(
            "headgate_jobs_outcomes_total", {**labels, "outcome": "succeeded"}
        )
        == 5
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("clear_of_the_hour")
def test_the_scheduler_observes_its_lag():
    from datetime import timedelta

    from prometheus_client import REGISTRY

    from headgate_django import schedules
    from headgate_django.models import Schedule
    from headgate_django.schedules.scheduler import run_pass
    from headgate_django.store import db_now

    def sample(name, **labels):
        return REGISTRY.get_sample_value(f"headgate_schedule_lag_seconds_{name}", labels) or 0.0

    m.metrics()
    before = (sample("count"), sample("bucket", le="1.0"), sample("bucket", le="10.0"))
    schedules.upsert("metrics-lag", "@every 1h", tasks.noop.envelope())
    Schedule.objects.update(next_run_at=db_now() - timedelta(seconds=5))
    assert run_pass() == {"enqueued": 1}
    after = (sample("count"), sample("bucket", le="1.0"), sample("bucket", le="10.0"))
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 0, 1]  # 5 s late


def test_threads_that_first_touch_the_metrics_at_once_share_one_set():
    """A worker's threads all get to the metrics first at about the same moment; a second
    set would be refused by the registry (``DuplicateTimeseries``) and kill one thread."""
    code = (
        "import sys, threading\n"
        "sys.setswitchinterval(1e-6)  # switch threads as often as possible\n"
        "from headgate_django import metrics as m\n"
        "gate, errors, made = threading.Barrier(16), [], []\n"
        "def first():\n"
        "    gate.wait()\n"
        "    try:\n"
        "        made.append(m.metrics())\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=first) for _ in range(16)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "assert not errors, errors\n"
        "assert len({id(x) for x in made}) == 1\n"
    )
    for _ in range(3):
        result = fresh_python(code)
        assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_metrics_port_without_prometheus_client_names_the_option_once(monkeypatch):
    from django.core.management import CommandError, call_command

    monkeypatch.setattr(m, "prometheus_client", None)  # as when the extra is not installed
    with pytest.raises(CommandError) as refused:
        call_command("runworkers", "--burst", "--metrics-port", "9100")
    assert str(refused.value) == (
        "--metrics-port: needs prometheus_client (pip install prometheus-client)"
    )


@pytest.mark.django_db
def test_metrics_port_in_use_names_the_address_and_the_way_out():
    import socket

    from django.core.management import CommandError, call_command

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(CommandError) as refused:
            call_command("runworkers", "--burst", "--metrics-port", str(port))
    assert str(refused.value) == (
        f"--metrics-port {port}: 127.0.0.1:{port} is in use: stop what listens there, or "
        "choose another port"
    )

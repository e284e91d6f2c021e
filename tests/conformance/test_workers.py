"""The worker registry and the per-minute counters: one statement per write, the store
clock's judgement of live, gone and stopped, and their retention."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from headgate_django.models import QueueMinute, Worker
from headgate_django.store.workers import (
    MINUTES_KEPT,
    Beat,
    epoch_minute,
    queue_minutes,
    queue_minutes_add,
    worker_get,
    worker_heartbeat,
    worker_list,
    worker_prune,
)
from headgate_django.worker.duties import DutyRunner, default_duties

pytestmark = pytest.mark.django_db


def beat(worker_id: str = "host-a:1:abc", *, heartbeat: timedelta = timedelta(seconds=5), **kw):
    fields = {
        "host": "host-a",
        "pid": 1,
        "queues": ["default", "emails"],
        "concurrency": 4,
        **kw,
    }
    return Beat(worker_id=worker_id, heartbeat=heartbeat, **fields)


def test_a_heartbeat_is_one_statement_that_inserts_then_refreshes_the_row():
    with CaptureQueriesContext(connection) as first:
        worker_heartbeat(beat(in_flight=2, in_flight_by_queue={"default": 2}, claimed=5))
    assert len(first.captured_queries) == 1
    started = Worker.objects.get().started_at
    with CaptureQueriesContext(connection) as second:
        worker_heartbeat(beat(in_flight=0, claimed=9, completed=7, retried=1, failed=1))
    assert len(second.captured_queries) == 1
    row = Worker.objects.get()
    assert (row.claimed, row.completed, row.retried, row.failed) == (9, 7, 1, 1)
    assert row.in_flight == 0 and row.in_flight_by_queue == {}
    assert row.started_at == started and row.last_heartbeat_at >= started
    view = worker_get("host-a:1:abc")
    assert view is not None
    assert view.status == "live" and view.queues == ["default", "emails"]
    assert view.heartbeat_s == 5.0 and view.stopped_at is None


def test_an_id_reused_by_another_process_or_after_a_stop_starts_over():
    worker_heartbeat(beat("fixed", pid=1))
    age("fixed", timedelta(hours=1))
    Worker.objects.filter(pk="fixed").update(started_at=F("started_at") - timedelta(hours=1))
    first = Worker.objects.get(pk="fixed").started_at
    worker_heartbeat(beat("fixed", pid=1))
    assert Worker.objects.get(pk="fixed").started_at == first  # the same process
    worker_heartbeat(beat("fixed", pid=2))
    second = Worker.objects.get(pk="fixed").started_at
    assert second > first and Worker.objects.get(pk="fixed").pid == 2
    Worker.objects.filter(pk="fixed").update(started_at=F("started_at") - timedelta(hours=1))
    worker_heartbeat(beat("fixed", pid=2), stopped=True)
    stopped = Worker.objects.get(pk="fixed").started_at
    assert stopped < second  # the stop of the same process keeps it
    worker_heartbeat(beat("fixed", pid=2))  # started again with the same id and pid
    again = Worker.objects.get(pk="fixed")
    assert again.started_at > stopped and again.stopped_at is None


def test_every_queue_is_stored_as_null():
    worker_heartbeat(beat(queues=None))
    assert worker_get("host-a:1:abc").queues is None


def test_a_clean_stop_marks_the_worker_stopped():
    worker_heartbeat(beat())
    worker_heartbeat(beat(), stopped=True)
    view = worker_get("host-a:1:abc")
    assert view.status == "stopped" and view.stopped_at is not None


def age(worker_id: str, by: timedelta) -> None:
    """Move the last heartbeat back, as if ``by`` had passed on the store clock."""
    Worker.objects.filter(pk=worker_id).update(last_heartbeat_at=F("last_heartbeat_at") - by)


def test_a_worker_that_misses_three_beats_is_gone():
    worker_heartbeat(beat("fast", heartbeat=timedelta(seconds=5)))
    worker_heartbeat(beat("slow", heartbeat=timedelta(minutes=1)))
    assert {w.id: w.status for w in worker_list()} == {"fast": "live", "slow": "live"}
    age("fast", timedelta(seconds=16))  # more than 3 × its 5 s
    age("slow", timedelta(seconds=16))  # less than 3 × its minute
    assert {w.id: w.status for w in worker_list()} == {"fast": "gone", "slow": "live"}
    worker_heartbeat(beat("fast", heartbeat=timedelta(seconds=5)))
    assert worker_get("fast").status == "live"


def test_the_store_clock_judges_a_short_heartbeat_gone():
    worker_heartbeat(beat("blink", heartbeat=timedelta(milliseconds=10)))
    time.sleep(0.1)  # more than 3 × 10 ms on the store clock
    assert worker_get("blink").status == "gone"


def test_list_pages_by_id():
    for name in ("w-c", "w-a", "w-b"):
        worker_heartbeat(beat(name))
    assert [w.id for w in worker_list()] == ["w-a", "w-b", "w-c"]
    assert [w.id for w in worker_list(after="w-a", limit=1)] == ["w-b"]
    assert worker_get("w-missing") is None


def test_retention_drops_old_registry_rows_and_old_minutes():
    worker_heartbeat(beat("old"))
    worker_heartbeat(beat("new"))
    age("old", timedelta(hours=2))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {epoch_minute(connection)}", [])
        now_minute = int(cursor.fetchone()[0])
    QueueMinute.objects.create(queue="q", minute=now_minute - MINUTES_KEPT - 1, completed=1)
    QueueMinute.objects.create(queue="q", minute=now_minute - 5, completed=1)
    assert worker_prune(retention=timedelta(hours=1)) == {"workers": 1, "minutes": 1}
    assert [w.id for w in worker_list()] == ["new"]
    assert list(QueueMinute.objects.values_list("minute", flat=True)) == [now_minute - 5]


def test_the_maintenance_duty_prunes_the_registry():
    worker_heartbeat(beat("ancient"))
    Worker.objects.filter(pk="ancient").update(last_heartbeat_at="2000-01-01T00:00:00Z")
    worker_heartbeat(beat("recent"))
    duty = next(d for d in default_duties() if d.name == "workers-prune")
    DutyRunner("pruner", [duty]).tick()
    assert list(Worker.objects.values_list("id", flat=True)) == ["recent"]


def test_minute_counts_add_up_in_one_statement_per_flush():
    with CaptureQueriesContext(connection) as captured:
        queue_minutes_add({"default": (3, 1, 0), "emails": (0, 0, 2)})
    assert len(captured.captured_queries) == 1
    queue_minutes_add({"default": (2, 0, 1)})
    queue_minutes_add({})
    current, series = queue_minutes(minutes=60)
    assert set(series) == {"default", "emails"}
    assert len(series["default"]) == 60
    assert series["default"][-1][0] == current
    # Two flushes may straddle a minute boundary; the hour's sums are what they added.
    totals = [sum(row[i] for row in series["default"]) for i in (1, 2, 3)]
    assert totals == [5, 1, 1]
    assert [sum(row[i] for row in series["emails"]) for i in (1, 2, 3)] == [0, 0, 2]
    assert [m for m, *_ in series["default"]] == list(range(current - 59, current + 1))


def test_no_minutes_yet_is_an_empty_series_at_the_store_clock():
    current, series = queue_minutes()
    assert series == {} and current > 29_000_000  # minutes since 1970: past 2025

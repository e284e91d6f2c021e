"""Admin lists whose filters no index serves read a window of the newest rows, say so, and
link to the whole list; lists an index serves read the whole table, with no notice.

The window is made small here (``WINDOW``) so that a handful of rows fills it: the jobs of
a rare queue then lie beyond it, as they would behind millions of newer jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from headgate_django.kernel.states import State
from headgate_django.models import (
    Effect,
    Execution,
    ExecutionRun,
    Graft,
    HistoryEvent,
    IdempotencyRecord,
    Job,
    PartitionDeficit,
    Quarantine,
    QueueMinute,
    RunHistoryEvent,
    ScheduleEvent,
    SignalEmission,
    SignalInbox,
    UniqueWindow,
    WorkflowCheckpoint,
)
from headgate_django.store import windows
from headgate_django.store.console import job_page_fingerprint
from tests.conformance.helpers import enqueue_job, job_in_state

pytestmark = pytest.mark.django_db

WINDOW = 4
NOTICE = "Showing matches among the newest 4 jobs only"
JOBS = reverse("admin:headgate_django_job_changelist")


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "WINDOW", WINDOW)


@pytest.fixture
def client(superuser: Any) -> Client:
    client = Client()
    client.force_login(superuser)
    return client


@pytest.fixture
def jobs() -> Iterator[dict[str, list[str]]]:
    """Old jobs of a rare queue (one completed, one archived), then newer ones of a busy
    queue, more than the window holds. Ids order jobs (ULIDs made in one millisecond do
    not), so they are given."""
    made: dict[str, list[str]] = {"rare-completed": [], "rare-archived": [], "busy": []}
    made["rare-completed"].append(job_in_state(State.COMPLETED, queue="rare", id="job-a1")[0])
    made["rare-archived"].append(job_in_state(State.ARCHIVED, queue="rare", id="job-a2")[0])
    made["busy"] = [enqueue_job(queue="busy", id=f"job-b{n}") for n in range(WINDOW + 2)]
    yield made


def _shown(response: Any) -> list[str]:
    assert response.status_code == 200
    return [job.id for job in response.context["cl"].result_list]


@pytest.mark.parametrize(
    "query",
    [
        {"queue__exact": "rare"},
        {"queue": "rare"},
        {"queue__exact": "rare", "state__exact": "completed"},
    ],
)
def test_a_queue_no_index_serves_is_read_in_a_window_with_a_link_to_all(
    client: Client, jobs: dict[str, list[str]], query: dict[str, str]
) -> None:
    windowed = client.get(JOBS, query)
    assert _shown(windowed) == []
    page = windowed.content.decode()
    assert NOTICE in page
    whole = client.get(JOBS, {**query, "whole": "1"})
    expected = jobs["rare-completed"] + ([] if "state__exact" in query else jobs["rare-archived"])
    assert _shown(whole) == sorted(expected, reverse=True)
    assert NOTICE not in whole.content.decode()
    # The notice's link is the list's own filters and the lifted window.
    assert 'whole=1">Search all jobs</a>' in page.replace("&amp;", "&")
    # Read without a window, the list would read the whole table every second if live.
    assert 'data-ws="' in page
    assert 'data-ws="' not in whole.content.decode()


def test_the_window_keeps_the_newest_matches(client: Client, jobs: dict[str, list[str]]) -> None:
    response = client.get(JOBS, {"queue__exact": "busy"})
    assert _shown(response) == sorted(jobs["busy"], reverse=True)[:WINDOW]
    assert response.context["cl"].result_count == WINDOW
    assert NOTICE in response.content.decode()


@pytest.mark.parametrize(
    ("query", "matching"),
    [
        ({}, {}),
        ({"state__exact": "archived"}, {"state": "archived"}),
        ({"state__exact": "completed"}, {"state": "completed"}),
        ({"kind__exact": "test.noop"}, {"kind": "test.noop"}),
        (
            {"queue__exact": "rare", "state__exact": "archived"},
            {"queue": "rare", "state": "archived"},
        ),
        ({"q": "test.no"}, {"kind__startswith": "test.no"}),
    ],
)
def test_a_list_an_index_serves_reads_the_whole_table(
    client: Client, jobs: dict[str, list[str]], query: dict[str, str], matching: dict[str, str]
) -> None:
    response = client.get(JOBS, query)
    assert NOTICE not in response.content.decode()
    expected = Job.objects.filter(**matching).values_list("id", flat=True)
    assert len(expected) > 0
    assert _shown(response) == sorted(expected, reverse=True)


def test_no_notice_while_the_table_fits_the_window(client: Client) -> None:
    rare = job_in_state(State.COMPLETED, queue="rare", id="job-a1")[0]
    enqueue_job(queue="busy", id="job-b1")
    response = client.get(JOBS, {"queue__exact": "rare"})
    assert _shown(response) == [rare]
    assert "Showing matches among" not in response.content.decode()


def test_the_window_is_a_range_of_the_primary_key(
    client: Client, jobs: dict[str, list[str]]
) -> None:
    """One read finds the edge (``LIMIT 1 OFFSET`` on the ordering index); the page and the
    pager's count then read a range of the primary key from it, not the table."""
    edge = sorted(jobs["busy"], reverse=True)[WINDOW - 1]
    with CaptureQueriesContext(connection) as captured:
        client.get(JOBS, {"queue__exact": "rare"})
    selects = [q["sql"] for q in captured.captured_queries if "headgate_job" in q["sql"]]
    assert any(f"LIMIT 1 OFFSET {WINDOW - 1}" in sql for sql in selects), selects
    listed = [sql for sql in selects if "'rare'" in sql]
    assert len(listed) == 2  # the capped count and the page
    assert all(f">= '{edge}'" in sql for sql in listed), listed


def test_the_live_first_page_reads_the_same_window(jobs: dict[str, list[str]]) -> None:
    assert job_page_fingerprint(queue="rare") == ()
    with CaptureQueriesContext(connection) as captured:
        busy = job_page_fingerprint(queue="busy")
    assert [row[0] for row in busy] == sorted(jobs["busy"], reverse=True)[:WINDOW]
    assert any(f"LIMIT 1 OFFSET {WINDOW - 1}" in q["sql"] for q in captured.captured_queries)
    archived = job_page_fingerprint(queue="rare", state="archived")
    assert [row[0] for row in archived] == jobs["rare-archived"]


def test_a_workers_running_jobs_are_served_its_other_jobs_are_not(
    client: Client, jobs: dict[str, list[str]]
) -> None:
    running = {"queue__exact": "busy", "state__exact": "running", "claimed_by__exact": "w"}
    assert NOTICE not in client.get(JOBS, running).content.decode()
    assert NOTICE in client.get(JOBS, {"claimed_by__exact": "w"}).content.decode()


def test_failed_workflows_are_listed_through_their_index(client: Client) -> None:
    for n in range(WINDOW + 2):
        WorkflowCheckpoint.objects.create(
            workflow_id=f"wf-{n}", coordinator_job_id=f"c-{n}", failed=n == 0
        )
    url = reverse("admin:headgate_django_workflowcheckpoint_changelist")
    response = client.get(url, {"failed__exact": "1"})
    assert [c.pk for c in response.context["cl"].result_list] == ["wf-0"]
    assert "Showing matches among" not in response.content.decode()
    indexes = connection.introspection.get_constraints(
        connection.cursor(), WorkflowCheckpoint._meta.db_table
    )
    assert ["failed", "workflow_id"] in [i["columns"] for i in indexes.values() if i["index"]]


def test_executions_of_one_state_are_read_in_a_window(client: Client) -> None:
    now = timezone.now()
    for n in range(WINDOW + 2):
        Execution.objects.create(
            id=f"e-{n}",
            name="checkout",
            version="1",
            state="failed" if n == 0 else "succeeded",
            created_at=now + timedelta(seconds=n),
            updated_at=now,
        )
    url = reverse("admin:headgate_django_execution_changelist")
    windowed = client.get(url, {"state__exact": "failed"})
    assert list(windowed.context["cl"].result_list) == []
    assert "Showing matches among the newest 4 executions only" in windowed.content.decode()
    whole = client.get(url, {"state__exact": "failed", "whole": "1"})
    assert [e.pk for e in whole.context["cl"].result_list] == ["e-0"]
    everything = client.get(url)
    assert len(everything.context["cl"].result_list) == WINDOW + 2
    assert "Showing matches among" not in everything.content.decode()


def _execution(n: int, name: str = "checkout") -> Execution:
    now = timezone.now()
    created = now + timedelta(minutes=n)
    return Execution.objects.create(
        id=f"e-{n}", name=name, version="1", created_at=created, updated_at=now
    )


def _finished_run(n: int, run_id: str, at: Any) -> ExecutionRun:
    return ExecutionRun.objects.create(
        execution=_execution(n), number=1, run_id=run_id, events=1, started_at=at, finished_at=at
    )


#: Each list whose search no index serves: how to make its row ``n`` holding ``key`` where
#: the search looks, and which row lies beyond the window (the first made in the list's
#: newest-first order, the last in an ascending one).
SEARCHED: dict[str, tuple[Callable[[int, str, Any], object], int]] = {
    "signalemission": (
        lambda n, key, at: SignalEmission.objects.create(
            workflow_id=f"wf-{n}", signal="go", idempotency_key=key, emitted_at=at
        ),
        0,
    ),
    "effect": (
        lambda n, key, at: Effect.objects.create(job_id=key, name="x", fence=1, created_at=at),
        -1,
    ),
    "uniquewindow": (
        lambda n, key, at: UniqueWindow.objects.create(unique_key=key, job_id="j", expires_at=at),
        -1,
    ),
    "quarantine": (
        lambda n, key, at: Quarantine.objects.create(fingerprint=key, kind="k", quarantined_at=at),
        0,
    ),
    "queueminute": (lambda n, key, at: QueueMinute.objects.create(queue=key, minute=n), 0),
    "idempotencyrecord": (
        lambda n, key, at: IdempotencyRecord.objects.create(
            key_digest=f"d-{n}",
            key=key,
            user="1",
            method="POST",
            path="/",
            body_hash="",
            created_at=at,
            expires_at=at,
        ),
        0,
    ),
    "executionrun": (_finished_run, -1),
    "signalinbox": (
        lambda n, key, at: SignalInbox.objects.create(
            workflow=_execution(n), name="go", message_id=key, seq=1, received_at=at
        ),
        0,
    ),
    "execution": (lambda n, key, at: _execution(n, name=key), 0),
    "runhistoryevent": (
        lambda n, key, at: RunHistoryEvent.objects.create(
            run=_finished_run(n, key, at),
            seq=1,
            type="started",
            at=at,
        ),
        -1,
    ),
}


@pytest.mark.parametrize("name", sorted(SEARCHED))
def test_a_search_no_index_serves_is_read_in_a_window(client: Client, name: str) -> None:
    make, far = SEARCHED[name]
    count = WINDOW + 2
    now = timezone.now()
    for n in range(count):
        make(n, "needle" if n == far % count else f"k-{n}", now + timedelta(minutes=n))
    url = reverse(f"admin:headgate_django_{name}_changelist")
    windowed = client.get(url, {"q": "needle"})
    assert list(windowed.context["cl"].result_list) == []
    # The needle is outside the window: last on a list that sorts ascending, first on one
    # that shows the newest first, and the notice names which end the window holds.
    where = "the newest 4" if far == 0 else "the first 4"
    assert f"Showing matches among {where}" in windowed.content.decode()
    whole = client.get(url, {"q": "needle", "whole": "1"})
    assert len(whole.context["cl"].result_list) == 1
    everything = client.get(url)
    assert len(everything.context["cl"].result_list) == count
    assert "Showing matches among" not in everything.content.decode()


#: Each list searched with case through an index: how to make its row ``n`` holding
#: ``key`` where the search looks.
INDEX_SEARCHED: dict[str, Callable[[int, str, Any], object]] = {
    "workflowcheckpoint": lambda n, key, at: WorkflowCheckpoint.objects.create(
        workflow_id=key, coordinator_job_id=f"c-{n}"
    ),
    "graft": lambda n, key, at: Graft.objects.create(
        workflow_id=key, revision=2, receipt_job_id=f"r-{n}", decided_at=at
    ),
    "historyevent": lambda n, key, at: HistoryEvent.objects.create(
        execution=Execution.objects.create(
            id=key, name="checkout", version="1", created_at=at, updated_at=at
        ),
        seq=1,
        type="started",
        at=at,
    ),
    "partitiondeficit": lambda n, key, at: PartitionDeficit.objects.create(
        queue=key, partition_key=f"p-{n}", deficit=1
    ),
    "scheduleevent": lambda n, key, at: ScheduleEvent.objects.create(
        schedule_name=key, tick_at=at, outcome="enqueued", recorded_at=at
    ),
}


@pytest.mark.parametrize("name", sorted(INDEX_SEARCHED))
def test_a_search_with_case_is_read_in_full(client: Client, name: str) -> None:
    """Ids and names are searched as stored, with case, through their index: a match is
    found wherever it lies in the table, with no window, and the term in another case
    is another id (compared without case, no index served the search)."""
    count = WINDOW + 2
    now = timezone.now()
    for n in range(count):
        INDEX_SEARCHED[name](n, "needle" if n == 0 else f"k-{n}", now + timedelta(minutes=n))
    url = reverse(f"admin:headgate_django_{name}_changelist")
    found = client.get(url, {"q": "needle"})
    assert len(found.context["cl"].result_list) == 1
    assert "Showing matches among" not in found.content.decode()
    other_case = client.get(url, {"q": "NEEDLE"})
    assert list(other_case.context["cl"].result_list) == []

"""Resumable work: completed steps are skipped on retry, a cursor step resumes from its
saved cursor, and both are fenced like every other write."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from headgate_django import store, testing
from headgate_django.context import JobContext
from headgate_django.exceptions import DefinitionError, LeaseLostError
from tests.app import tasks
from tests.app.models import Execution
from tests.conformance.helpers import BLINK, claim, enqueue_job, expire_lease, row

pytestmark = pytest.mark.django_db


def executions(job_id: str) -> list[tuple[str, int]]:
    return list(
        Execution.objects.filter(job_id=job_id).order_by("id").values_list("label", "attempt")
    )


def test_completed_steps_are_skipped_on_retry():
    job_id = tasks.steps.enqueue(fail_at="c")
    report = testing.run_jobs(include_scheduled=True)
    assert report.outcomes == [(job_id, "retried"), (job_id, "completed")]
    assert executions(job_id) == [("a", 1), ("b", 1), ("c", 2)]
    after = row(job_id)
    assert after["result"] == 6
    assert after["checkpoint"]["completed_steps"] == ["a", "b", "c"]
    assert after["checkpoint"]["step_results"] == {"a": 1, "b": 2, "c": 3}


def test_steps_run_once_each_without_failures():
    job_id = tasks.steps.enqueue()
    assert testing.run_jobs().outcomes == [(job_id, "completed")]
    assert executions(job_id) == [("a", 1), ("b", 1), ("c", 1)]


def test_the_checkpoint_after_a_failed_attempt_names_the_completed_steps():
    job_id = tasks.steps.enqueue(fail_at="c")
    assert testing.run_one() == (job_id, "retried")
    checkpoint = row(job_id)["checkpoint"]
    assert checkpoint["completed_steps"] == ["a", "b"]
    assert checkpoint["last_completed_step"] == "b"
    assert "in_progress_step" not in checkpoint


def test_cursor_step_resumes_from_the_saved_cursor():
    job_id = tasks.cursor_pages.enqueue(pages=5, fail_after=2)
    assert testing.run_one() == (job_id, "retried")
    mid = row(job_id)
    assert mid["cp_cursor"] == b"3"
    assert mid["checkpoint"]["cursor_step"] == "import-pages"
    assert mid["checkpoint"]["in_progress_step"] == "import-pages"

    assert testing.run_jobs(include_scheduled=True).outcomes == [(job_id, "completed")]
    assert executions(job_id) == [
        ("page:0", 1),
        ("page:1", 1),
        ("page:2", 1),
        ("page:3", 2),
        ("page:4", 2),
    ]
    after = row(job_id)
    assert (after["result"], after["cp_cursor"]) == (5, None)
    assert after["checkpoint"]["completed_steps"] == ["import-pages"]
    assert "cursor_step" not in after["checkpoint"]


def test_cursor_step_without_failures_starts_from_none():
    job_id = tasks.cursor_pages.enqueue(pages=2)
    assert testing.run_jobs().outcomes == [(job_id, "completed")]
    assert executions(job_id) == [("page:0", 1), ("page:1", 1)]


def test_set_cursor_outside_a_cursor_step_is_refused():
    ctx = JobContext(claim(enqueue_job()))
    with pytest.raises(DefinitionError, match="step_cursor"):
        ctx.set_cursor(b"1")
    with pytest.raises(DefinitionError, match="bytes"):
        ctx.step_cursor("s", lambda cursor: ctx.set_cursor("1"))


@pytest.mark.parametrize(
    ("current", "total", "message"),
    [
        (-1, 5, ""),
        (6, 5, ""),
        (0, 0, ""),
        (0, 2**53, ""),
        (0.5, 1, ""),  # stored as given, where the API and the console read whole steps
        (1, 2.0, ""),
        (True, 1, ""),
        (1, 2, None),  # failed with a TypeError from slicing
    ],
)
def test_progress_bounds(current: object, total: object, message: object):
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id))
    with pytest.raises(DefinitionError):
        ctx.set_progress(current, total, message)  # type: ignore[arg-type]
    assert row(job_id)["progress"] is None


def test_a_step_whose_lease_is_lost_is_not_recorded_as_done():
    job_id = enqueue_job()
    ctx = JobContext(claim(job_id, lease_ttl=BLINK))

    def lose_the_lease() -> int:
        expire_lease()
        assert store.job_reclaim_expired().retried == [job_id]
        return 1

    ctx.step("first", lambda: 0)
    with pytest.raises(LeaseLostError):
        ctx.step("charge", lose_the_lease)
    assert ctx.cancelled is True
    after = row(job_id)
    assert after["checkpoint"]["completed_steps"] == ["first"]
    assert after["checkpoint"]["in_progress_step"] == "charge"
    assert after["errors"][-1]["error"].endswith("during step 'charge'")


@pytest.fixture
def sync_thread_connections():
    """The async writes run on asgiref's sync thread, which keeps its own connection; close
    it afterwards, or the test database cannot be dropped."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


@pytest.mark.django_db(transaction=True)  # the async writes use another thread's connection
@pytest.mark.usefixtures("sync_thread_connections")
def test_async_handlers_have_the_same_resumable_work():
    job_id = tasks.async_steps.enqueue(pages=4, fail_after=1)
    assert testing.run_one() == (job_id, "retried")
    mid = row(job_id)
    assert mid["cp_cursor"] == b"2"
    assert mid["checkpoint"]["completed_steps"] == ["a", "b"]
    assert mid["progress"] == {"current": 2, "total": 4, "message": "page 2"}

    assert testing.run_jobs(include_scheduled=True).outcomes == [(job_id, "completed")]
    assert executions(job_id) == [
        ("a", 1),
        ("page:0", 1),
        ("page:1", 1),
        ("page:2", 2),
        ("page:3", 2),
    ]
    assert row(job_id)["result"] == 1 + 10 + 4


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("sync_thread_connections")
def test_async_writes_of_a_stale_attempt_do_not_land():
    job_id = tasks.async_steps.enqueue()
    stale = JobContext(claim(job_id, lease_ttl=BLINK))
    expire_lease()
    store.job_reclaim_expired()
    with pytest.raises(LeaseLostError):
        asyncio.run(stale.aset_progress(1, 2))
    assert stale.cancelled
    assert row(job_id)["progress"] is None

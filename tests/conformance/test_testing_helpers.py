"""``headgate_django.testing``: the helpers users test their own tasks with."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from headgate_django import Envelope, enqueue, testing
from tests.app import tasks
from tests.conformance.helpers import state_of

pytestmark = pytest.mark.django_db


def test_run_one_runs_exactly_one_job():
    first = tasks.echo.enqueue(value=1)
    second = enqueue(dataclasses.replace(tasks.echo.envelope(value=2), priority=-1))[0]
    assert testing.run_one() == (first, "completed")
    assert state_of(second) == "available"
    assert testing.run_one() == (second, "completed")
    assert testing.run_one() is None


def test_run_one_and_run_jobs_respect_queues():
    mail = enqueue(Envelope(kind="test.noop", queue="mail"))[0]
    other = enqueue(Envelope(kind="test.noop", queue="other"))[0]
    assert testing.run_one(queues=["mail"]) == (mail, "completed")
    assert testing.run_jobs(queues=["mail"]).outcomes == []
    assert state_of(other) == "available"


def test_run_jobs_reports_each_outcome():
    ok = tasks.echo.enqueue()
    skipped = tasks.skip.enqueue()
    failing = tasks.always_fail.enqueue()
    report = testing.run_jobs()
    assert sorted(report.outcomes) == sorted(
        [(ok, "completed"), (skipped, "skipped"), (failing, "retried")]
    )
    assert (report.completed, report.skipped, report.retried, report.archived) == (1, 1, 1, 0)
    assert state_of(failing) == "retryable"  # not due, so not run again


def test_run_jobs_with_include_scheduled_runs_retries_and_timers():
    failing = tasks.always_fail.enqueue()
    later = tasks.echo.enqueue_at(timedelta(hours=5), value="later")
    report = testing.run_jobs(include_scheduled=True)
    assert report.counts == {"retried": 2, "archived": 1, "completed": 1}
    assert (state_of(failing), state_of(later)) == ("archived", "completed")


def test_run_jobs_stops_at_max_jobs():
    ids = [tasks.noop.enqueue() for _ in range(3)]
    report = testing.run_jobs(max_jobs=2)
    assert len(report.outcomes) == 2
    assert sorted(state_of(job_id) for job_id in ids) == ["available", "completed", "completed"]


def test_run_jobs_leaves_unknown_kinds_alone():
    [unknown] = enqueue(Envelope(kind="test.nobody-knows-me"))
    assert testing.run_jobs(include_scheduled=True).outcomes == []
    assert state_of(unknown) == "available"


def test_enqueued_filters():
    a = tasks.echo.enqueue(value=1)
    b = enqueue(Envelope(kind="test.echo", queue="mail"))[0]
    c = tasks.noop.enqueue()
    # Sets: jobs enqueued within one millisecond of each other tie on enqueued_at on SQLite.
    assert {j.id for j in testing.enqueued()} == {a, b, c}
    assert {j.id for j in testing.enqueued("test.echo")} == {a, b}
    assert [j.id for j in testing.enqueued("test.echo", queue="mail")] == [b]
    testing.run_one(queues=["mail"])
    assert {j.id for j in testing.enqueued(state="available")} == {a, c}


def test_assert_enqueued_passes_and_returns_the_jobs():
    job_id = tasks.echo.enqueue(value=1)
    assert [j.id for j in testing.assert_enqueued("test.echo")] == [job_id]
    assert [j.id for j in testing.assert_enqueued("test.echo", 1, state="available")] == [job_id]
    assert testing.assert_enqueued("test.noop", 0) == []


def test_assert_enqueued_fails_with_a_clear_message():
    tasks.echo.enqueue(value=1)
    with pytest.raises(AssertionError, match=r"no test\.noop job was enqueued"):
        testing.assert_enqueued("test.noop")
    with pytest.raises(AssertionError, match=r"expected 2 test\.echo job\(s\), found 1"):
        testing.assert_enqueued("test.echo", 2)
    with pytest.raises(AssertionError, match="found 0"):
        testing.assert_enqueued("test.echo", 1, state="completed")

"""A handler that raises a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
``KeyboardInterrupt``, ``GeneratorExit``, a ``CancelledError`` of its own) fails its attempt
like any other error: counted, recorded with its class and traceback, retried or archived
by the usual rules, and never let out to the caller that runs the job."""

from __future__ import annotations

import pytest

from headgate_django import testing
from tests.app import tasks
from tests.conformance.helpers import row

pytestmark = pytest.mark.django_db

CLASSES = {
    "SystemExit": "builtins.SystemExit",
    "KeyboardInterrupt": "builtins.KeyboardInterrupt",
    "GeneratorExit": "builtins.GeneratorExit",
    "CancelledError": "asyncio.exceptions.CancelledError",
}


def _assert_failed_attempt(job_id: str, name: str, attempts: int) -> None:
    stored = row(job_id)
    assert stored["attempt"] == attempts
    assert stored["crash_attempt"] == 0
    errors = stored["errors"]
    assert len(errors) == attempts
    assert {e["kind"] for e in errors} == {"error"}
    assert errors[-1]["exception"] == CLASSES[name]
    assert errors[-1]["error"].startswith(f"{name}: raised by the handler")
    assert "raised by the handler" in errors[-1]["traceback"]
    assert "Traceback (most recent call last)" in errors[-1]["traceback"]


@pytest.mark.parametrize("name", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
def test_a_sync_handler_raising_it_fails_the_attempt_and_is_retried(name):
    job_id = tasks.base_exit.enqueue(name=name)
    assert testing.run_one() == (job_id, "retried")
    _assert_failed_attempt(job_id, name, attempts=1)
    report = testing.run_jobs(include_scheduled=True)
    assert report.outcomes == [(job_id, "archived")]  # max_attempts=2: the usual rule
    _assert_failed_attempt(job_id, name, attempts=2)
    assert row(job_id)["state"] == "archived"


@pytest.mark.parametrize("name", ["CancelledError", "SystemExit", "KeyboardInterrupt"])
def test_an_async_handler_raising_it_fails_the_attempt(name):
    job_id = tasks.async_base_exit.enqueue(name=name)
    assert testing.run_one() == (job_id, "retried")
    _assert_failed_attempt(job_id, name, attempts=1)

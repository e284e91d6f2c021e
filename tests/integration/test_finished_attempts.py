"""An attempt whose handler has returned keeps the outcome it returned.

Its outcome may still be on its way to the database (a success waits for the acker's next
batch, any other outcome is written by the handler's thread) when the attempt's deadline
passes or the drain window ends. Neither may then write a timeout or hand the job back: the
job would run a second time after it had finished. Each test drives one worker's own steps
in order, on the real store, so the interleaving is the one under test.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from headgate_django import enqueue
from headgate_django.worker.runner import Worker
from tests.app import tasks
from tests.integration.helpers import job

pytestmark = pytest.mark.django_db(transaction=True)


def _started(envelope):
    """A worker that has claimed ``envelope``'s job and started its attempt's clock."""
    [job_id] = enqueue(envelope)
    worker = Worker(concurrency=1, burst=True, run_duties=False)
    [claimed] = worker._claim(1)
    worker._hold(claimed)
    entry = worker._buffer.get()
    assert worker._begin(entry)
    return worker, entry, job_id


def _returned(envelope):
    """A worker that has run ``envelope``'s job to its return, the success not yet acked."""
    worker, entry, job_id = _started(envelope)
    worker._run_and_settle(entry)
    assert job(job_id).state == "running"  # the completion waits for the acker
    return worker, job_id


def _ack(worker):
    batch = []
    while not worker._acks.empty():
        batch.append(worker._acks.get())
    worker._write_acks(batch)


def test_a_deadline_passing_while_the_success_waits_for_its_ack_changes_nothing():
    envelope = dataclasses.replace(tasks.echo.envelope(value=7), timeout=timedelta(seconds=1))
    worker, job_id = _returned(envelope)

    worker._enforce_timeouts(time.monotonic() + 3600)  # long past the attempt's deadline
    row = job(job_id)
    assert (row.state, row.errors) == ("running", [])

    _ack(worker)
    row = job(job_id)
    assert (row.state, row.attempt, row.errors) == ("completed", 0, [])
    assert row.result == {"value": 7, "attempt": 1}


def test_the_end_of_the_drain_window_does_not_hand_back_a_finished_job(settings):
    settings.HEADGATE = {"SHUTDOWN_TIMEOUT": timedelta(0)}
    worker, job_id = _returned(tasks.echo.envelope(value=3))

    worker._drain()  # the window is over at once: only still-running handlers go back
    assert job(job_id).state == "running"

    _ack(worker)
    row = job(job_id)
    assert (row.state, row.attempt, row.crash_attempt) == ("completed", 0, 0)


def test_a_handler_that_returns_after_its_timeout_was_recorded_leaves_the_timeout():
    """The other order: the deadline is enforced first, so the late handler's success is
    dropped and the timeout stands (retried, one attempt charged)."""
    envelope = dataclasses.replace(tasks.echo.envelope(value=1), timeout=timedelta(seconds=1))
    worker, entry, job_id = _started(envelope)

    worker._enforce_timeouts(time.monotonic() + 3600)  # the handler has not returned yet
    worker._run_and_settle(entry)  # now it does: its success is not written
    assert worker._acks.empty()
    row = job(job_id)
    assert row.state in ("retryable", "available")
    assert row.attempt == 1
    assert "timeout" in row.errors[-1]["error"]

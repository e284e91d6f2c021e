"""Wake-ups: an idle worker starts a new job at once, not at its next poll.

PostgreSQL wakes it through LISTEN/NOTIFY, SQLite through the ``PRAGMA data_version``
watcher; MariaDB has neither and polls.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import job, runs, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_idle_worker_wakes_on_enqueue(start_worker):
    if connection.vendor not in ("postgresql", "sqlite"):
        pytest.skip("MySQL/MariaDB has no wake-up source; workers poll")
    worker = start_worker(env={"HEADGATE_TEST_LOG_LEVEL": "DEBUG"})
    # The worker logs this once its idle backoff reaches the 2 s maximum (the default).
    wait_for(lambda: "idle: next poll in 2.0 s" in worker.output())

    job_id = tasks.record_run.enqueue(label="wake")
    wait_for(lambda: state_is(job_id, "completed"))

    row = job(job_id)
    (execution,) = runs(job_id)
    # Polling alone would start it up to 2 s later; the margin below is generous on purpose.
    assert row.claimed_at - row.enqueued_at < timedelta(seconds=1), worker.output()
    assert execution.started_at - row.enqueued_at < timedelta(seconds=1), worker.output()
    assert worker.terminate() == 0

"""A workflow task whose database session is killed under its pass, from another session
(``pg_terminate_backend`` / ``KILL``, what a database restart or an operator does): a lost
connection is not the execution's failure (``durable.budget.gives_up``), so the worker runs
the attempt again on a new connection, uncharged, and the execution is not suspended."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from django.db import connection, connections

from headgate_django import durable
from headgate_django.worker.runner import Worker
from tests.durable.helpers import in_parallel, start, task_job, view

# transaction=True: the worker's handler thread must see the execution the test started.
pytestmark = pytest.mark.django_db(transaction=True)

#: Set by the test: the next pass of ``durable-lost-session`` kills its own session.
KILL: list[bool] = []


def _session_id() -> int:
    """This thread's database session, as the server names it."""
    pg = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()" if pg else "SELECT CONNECTION_ID()")
        return int(cursor.fetchone()[0])


def _end_session(session: int) -> None:
    """End ``session`` from this thread's own session, and wait until the server let it go."""
    pg = connections["default"].vendor == "postgresql"
    with connections["default"].cursor() as cursor:
        if pg:
            cursor.execute("SELECT pg_terminate_backend(%s)", [session])
        else:
            cursor.execute(f"KILL {session}")
        gone = (
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
            if pg
            else "SELECT 1 FROM information_schema.processlist WHERE id = %s"
        )
        for _ in range(200):
            cursor.execute(gone, [session])
            if cursor.fetchone() is None:
                return
            time.sleep(0.05)
    raise AssertionError(f"session {session} is still there")


@durable.workflow("durable-lost-session", version="1")
def loses_its_session(ctx: durable.Context, _: Any) -> str:
    if KILL:  # workflow code does no I/O: this one plays the outage, in the middle of a pass
        KILL.clear()
        session = _session_id()  # the worker thread's, on which the pass then commits
        (outcome,) = in_parallel(lambda: _end_session(session))
        assert outcome is None, outcome
        KILLED.append(session)
    return "done"


#: The sessions the workflow ended.
KILLED: list[int] = []


def test_a_pass_whose_session_is_killed_runs_again_and_is_not_suspended(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server session to lose")
    # One attempt: any failure charged to the task would suspend the execution at once.
    settings.HEADGATE = {"DURABLE_TASK_ATTEMPTS": 1}
    wf = start("durable-lost-session")
    KILLED.clear()
    KILL.append(True)
    try:
        with caplog.at_level(logging.ERROR, logger="headgate_django.durable"):
            Worker(concurrency=1, burst=True, run_duties=False).run()
    finally:
        KILL.clear()
    assert len(KILLED) == 1
    row = view(wf)
    assert (row.state, row.result, row.suspended_reason) == ("succeeded", "done", "")
    job = task_job(wf)
    assert (job.state, job.attempt, job.crash_attempt, job.errors) == ("completed", 0, 0, [])
    # Nor was a suspension tried (on MySQL/MariaDB its write fails on the dead session).
    assert not [r.getMessage() for r in caplog.records if r.name == "headgate_django.durable"]

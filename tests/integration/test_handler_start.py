"""A handler thread the system refuses to start (too many threads for its limits: a
``--concurrency`` too high) stops the worker with an error, its claimed jobs handed back,
instead of leaving them buffered, renewed and never run."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from headgate_django.worker.runner import Worker
from tests.app import tasks
from tests.integration.helpers import job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Refused(threading.Thread):
    """A thread the system has no room for: ``start()`` fails as CPython's does then."""

    def start(self) -> None:
        raise RuntimeError("can't start new thread")


def test_a_handler_thread_that_cannot_start_stops_the_worker_and_hands_jobs_back():
    job_ids = [tasks.echo.enqueue(value=n) for n in range(3)]
    worker = Worker(concurrency=1, burst=True, run_duties=False)
    worker._handlers[0] = Refused(name="headgate-job-0", daemon=True)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(timeout=60)
    if runner.is_alive():  # the old behaviour: the claimed jobs wait for nobody, for ever
        worker.stop()
        runner.join()
        raise AssertionError("the worker went on holding jobs no thread could run")
    assert failures == []
    assert worker.failed_to_start
    for job_id in job_ids:
        row = job(job_id)
        assert (row.state, row.attempt, row.crash_attempt) == ("available", 0, 0)

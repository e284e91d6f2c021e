"""A rate class configured while a real worker drains its jobs holds from the commit that
configures it, not from the moment the worker's cached view of the policies (at most
250 ms old) learns of it.

The queue is governed (a concurrency ceiling far above what runs), so its jobs are claimed
by the admitted claim: before the fix, a claim made with a view that knew no rate class
left the buckets unread, and leased the class's jobs uncharged for up to 250 ms. With
``discard`` the ceiling keeps the portable path on PostgreSQL too (its server function
always read the buckets); with ``queue`` it is the path of SQLite and MySQL/MariaDB.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from headgate_django import admission, enqueue
from headgate_django.models import Job
from headgate_django.store import vendor as v
from headgate_django.store.buckets import store_clock_ms
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "configured-late"
CLASS = "five"
RATE = 5


def claimed_ms() -> list[int]:
    """When each of the class's jobs was claimed, in store-clock epoch milliseconds."""
    return sorted(
        int(at.timestamp() * 1000)
        for at in Job.objects.filter(rate_class=CLASS, claimed_at__isnull=False).values_list(
            "claimed_at", flat=True
        )
    )


@pytest.mark.parametrize("on_saturated", ["queue", "discard"])
def test_a_class_configured_while_its_jobs_drain_is_charged_from_its_commit(
    start_worker, on_saturated, request
):
    if on_saturated == "queue" and v.connection_for("default").vendor == "postgresql":
        # Not yet explained: once in two CI runs, through PgBouncer, one claim of the
        # server function took 30 of the class's jobs in the second after the commit.
        request.applymarker(
            pytest.mark.xfail(reason="server-side governed claim: open defect", strict=False)
        )
    admission.set_concurrency_limit(QUEUE, 10_000, on_saturated=on_saturated)
    for batch in range(2):  # a second or more of work at the worker's pace
        enqueue(
            [
                dataclasses.replace(
                    tasks.record_run.envelope(label=f"j{batch}-{i}", sleep=0.01),
                    queue=QUEUE,
                    rate_class=CLASS,
                )
                for i in range(1000)
            ]
        )
    worker = start_worker("--queue", QUEUE, "--concurrency", "10", env=headgate_env(**FAST))
    wait_serving(worker)
    wait_for(lambda: Execution.objects.count() >= 50, timeout=30, interval=0.01)

    admission.set_rate_class(CLASS, limit=RATE, window=timedelta(seconds=1), burst=RATE)
    conn = v.connection_for("default")
    with conn.cursor() as cursor:
        committed_ms = store_clock_ms(cursor, conn)  # a moment after the commit
    time.sleep(1.5)

    first_second = [at for at in claimed_ms() if committed_ms <= at < committed_ms + 1000]
    # The burst, and what one second refills: nothing claimed in that second went uncharged.
    assert len(first_second) <= 2 * RATE, (
        f"{len(first_second)} jobs of a {RATE}/s class claimed in the second after it was "
        f"configured; its bucket holds {admission.rate_classes()[0]['tokens']:.1f} tokens"
    )
    # The class's jobs were still waiting: the worker was draining them, not done.
    assert Job.objects.filter(rate_class=CLASS, state="available").exists()
    assert worker.terminate() == 0, worker.output()[-4000:]

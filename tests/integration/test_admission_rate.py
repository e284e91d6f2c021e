"""A rate class across real worker processes: 20 per second with a burst of 20, shared by
two ``runworkers`` processes, measured from the handlers' own start records; pausing the
class stops claims within a claim cycle and resuming restarts them."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from headgate_django import admission, enqueue
from headgate_django.models import Job
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "rated"
CLASS = "twenty"
RATE = 20


def jobs(n: int, first: int = 0) -> list[str]:
    return enqueue(
        [
            dataclasses.replace(
                tasks.record_run.envelope(label=f"r{i}"), queue=QUEUE, rate_class=CLASS
            )
            for i in range(first, first + n)
        ]
    )


def starts() -> list:
    return sorted(
        Execution.objects.filter(
            job_id__in=Job.objects.filter(queue=QUEUE).values("id")
        ).values_list("started_at", flat=True)
    )


def test_twenty_per_second_across_two_processes_and_the_kill_switch(start_worker):
    admission.set_rate_class(CLASS, limit=RATE, window=timedelta(seconds=1), burst=RATE)
    env = headgate_env(**FAST)
    workers = [start_worker("--queue", QUEUE, "--concurrency", "10", env=env) for _ in range(2)]
    for worker in workers:
        wait_serving(worker)

    ids = jobs(120)
    wait_for(lambda: len(starts()) == 120, timeout=60, interval=0.1)
    at = starts()
    # The burst's 20 start at once; the next 100 are paid for at 20 per second from the
    # moment the bucket ran dry (the burst's last start).
    span = (at[119] - at[19]).total_seconds()
    rate = 100 / span
    assert RATE * 0.9 <= rate <= RATE * 1.1, f"{rate:.2f} jobs/s over {span:.2f} s"
    assert (at[19] - at[0]).total_seconds() < 1.0  # the burst was spent at once

    # The kill switch: nothing starts a claim cycle after the pause, until the resume.
    more = jobs(40, first=120)
    wait_for(lambda: len(starts()) >= 125, timeout=30, interval=0.02)
    admission.set_rate_class(CLASS, limit=RATE, window=timedelta(seconds=1), paused=True)
    paused_at = timezone.now()
    time.sleep(1.5)
    cycle = timedelta(seconds=FAST["IDLE_BACKOFF_MAX"] + 0.3)
    late = [s for s in starts() if s > paused_at + cycle]
    assert late == [], f"{len(late)} jobs started after the pause"
    assert Job.objects.filter(pk__in=more, state="available").exists()
    admission.set_rate_class(CLASS, limit=RATE, window=timedelta(seconds=1), paused=False)
    wait_for(
        lambda: Job.objects.filter(pk__in=ids + more, state="completed").count() == 160,
        timeout=60,
        interval=0.1,
    )
    for worker in workers:
        assert worker.terminate() == 0, worker.output()[-4000:]
    assert {w for w in Execution.objects.values_list("pid", flat=True)} == {w.pid for w in workers}

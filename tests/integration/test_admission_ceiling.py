"""A concurrency ceiling across real worker processes: a ceiling of 3 never has a 4th job
running, from the handlers' own start and end records and from the store, even when one
worker is SIGKILLed mid-run (its jobs keep their slots until they are reclaimed)."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from datetime import datetime

import pytest
from django.db import connections
from django.utils import timezone

from headgate_django import admission, enqueue
from headgate_django.models import Job
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUE = "ceiling"
JOBS = 60
CEILING = 3


def max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant (an end before a start at the same one)."""
    events = sorted(
        [(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1])
    )
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def handler_intervals(killed_at: datetime | None) -> list[tuple[datetime, datetime]]:
    """Each execution's start to its end; an execution with no end ran until the kill."""
    starts: dict[tuple[str, int], datetime] = {}
    ends: dict[tuple[str, int], datetime] = {}
    for job_id, label, fence, at in Execution.objects.filter(
        job_id__in=Job.objects.filter(queue=QUEUE).values("id")
    ).values_list("job_id", "label", "fence", "started_at"):
        (starts if label.startswith("start:") else ends)[(job_id, fence)] = at
    intervals = []
    for key, start in starts.items():
        end = ends.get(key)
        if end is None:
            assert killed_at is not None, f"execution {key} never ended"
            end = killed_at
        intervals.append((start, end))
    return intervals


class RunningSampler(threading.Thread):
    """Samples the store's count of the queue's running jobs until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most = 0
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while not self.done.is_set():
                n = Job.objects.filter(queue=QUEUE, state="running").count()
                self.most = max(self.most, n)
                self.samples += 1
                time.sleep(0.01)
        finally:
            connections.close_all()


@pytest.mark.parametrize("kill", [False, True], ids=["steady", "sigkill"])
def test_ceiling_of_three_across_two_processes(start_worker, kill):
    admission.set_concurrency_limit(QUEUE, CEILING)
    env = headgate_env(**FAST)
    args = ("--queue", QUEUE, "--concurrency", "10", "--lease-ttl", "1")
    workers = [start_worker(*args, env=env) for _ in range(2)]
    for worker in workers:
        wait_serving(worker)
    sampler = RunningSampler()
    sampler.start()
    ids = enqueue(
        [
            dataclasses.replace(tasks.sleeper.envelope(seconds=0.2, label=str(i)), queue=QUEUE)
            for i in range(JOBS)
        ]
    )
    killed_at = None
    victim = None
    if kill:
        wait_for(lambda: Execution.objects.filter(label__startswith="end:").count() >= 15)

        def killed_holding():
            # Killed while it holds running jobs, so the kill strands their slots. Each
            # worker is frozen first: a worker seen holding a job and then killed could
            # have acknowledged it in between (seen under load), and a frozen one cannot.
            for worker in workers:
                os.kill(worker.pid, signal.SIGSTOP)
                time.sleep(0.05)  # a commit it sent before it froze lands meanwhile
                if Job.objects.filter(
                    queue=QUEUE, state="running", claimed_by__contains=f":{worker.pid}:"
                ).exists():
                    worker.kill()
                    return worker
                os.kill(worker.pid, signal.SIGCONT)
            return None

        victim = wait_for(killed_holding, interval=0.005)
        killed_at = timezone.now()

    def all_completed() -> bool:
        return Job.objects.filter(queue=QUEUE, state="completed").count() == JOBS

    try:
        wait_for(all_completed, timeout=120, interval=0.25)
    finally:
        sampler.done.set()
        sampler.join(timeout=10)
    for worker in workers:
        if worker is victim:
            continue
        assert worker.terminate() == 0

    assert set(Job.objects.filter(queue=QUEUE).values_list("state", flat=True)) == {"completed"}
    assert len(ids) == JOBS
    assert max_overlap(handler_intervals(killed_at)) == CEILING
    assert sampler.samples > 10 and sampler.most == CEILING
    if kill:
        assert Job.objects.filter(queue=QUEUE, crash_attempt=1).exists()

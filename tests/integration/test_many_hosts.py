"""Eight worker processes, as if on eight hosts, drain one queue: every job runs exactly
once, and each maintenance duty stays with one of them while all eight run.

Each process has a worker id of its own (``--worker-id host-N``), as separate machines
would. The duties are sampled from ``headgate_duty`` every 20 ms while all eight serve:
a duty's holder may change only when its lease lapses or its holder stops, so with every
process alive each duty must have been held by exactly one of them. (The drain curve over
1, 2, 4 and 8 processes is a measurement: ``benchmarks/hosts.py``.)
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import pytest
from django.db import connection

from headgate_django import enqueue
from headgate_django.models import DutyLease, Job
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOSTS = 8
JOBS = 2000


class DutySampler(threading.Thread):
    """Reads every duty's holder every 20 ms until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.holders: dict[str, set[str]] = defaultdict(set)
        self.samples = 0
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.wait(0.02):
                for name, holder in DutyLease.objects.values_list("name", "holder"):
                    if holder:
                        self.holders[name].add(holder)
                self.samples += 1
        finally:
            connection.close()


def test_eight_hosts_drain_one_queue_each_job_once_and_each_duty_in_one_place(start_worker):
    env = headgate_env(**FAST)
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"host-{n}", env=env)
        for n in range(HOSTS)
    ]
    for worker in workers:
        wait_serving(worker, timeout=60)
    sampler = DutySampler()
    sampler.start()
    ids: list[str] = []
    for start in range(0, JOBS, 500):
        batch = [tasks.record_run.envelope(label=f"host-{i}") for i in range(start, start + 500)]
        ids += enqueue(batch)

    def all_completed() -> bool:
        return Job.objects.filter(kind="test.record", state="completed").count() == JOBS

    wait_for(all_completed, timeout=120, interval=0.25)
    time.sleep(1.0)  # a few more duty passes with every host alive
    sampler.halt.set()
    sampler.join(timeout=10)
    for worker in workers:
        assert worker.terminate() == 0, worker.output()

    per_job = Counter(Execution.objects.values_list("job_id", flat=True))
    assert set(per_job) == set(ids) and set(per_job.values()) == {1}
    jobs = Job.objects.filter(kind="test.record")
    assert set(jobs.values_list("state", "fence", "attempt", "crash_attempt")) == {
        ("completed", 1, 0, 0)
    }
    ran_on = Counter(Execution.objects.values_list("pid", flat=True))
    assert len(ran_on) > 1, f"one process did all the work: {ran_on}"
    assert set(ran_on) <= {w.pid for w in workers}

    assert sampler.samples > 20
    assert {"promote", "reclaim", "evict"} <= set(sampler.holders)
    held_by_many = {name: sorted(h) for name, h in sampler.holders.items() if len(h) != 1}
    assert held_by_many == {}, f"duties that changed hands while every host ran: {held_by_many}"
    hosts = {f"host-{n}" for n in range(HOSTS)}
    # A holder is its worker's id and a per-process suffix.
    assert {h.split("#")[0] for h in set().union(*sampler.holders.values())} <= hosts

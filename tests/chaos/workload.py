"""The chaos run's workload, enqueued in waves while the faults happen.

Ids are fixed in advance (``chaos-j-N``, ``chaos-dag-N``, ``chaos-d-N``) so a wave that
failed half-way through a database restart is simply sent again: enqueueing the same job
is a no-op, a durable start deduplicates on its business key, and a signal on its message
id.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

from django.db import DatabaseError, connection

from headgate_django import durable, enqueue
from headgate_django.envelope import Envelope
from headgate_django.workflows import Workflow
from tests.app.chaos_tasks import chaos_job, chaos_node

log = logging.getLogger("tests.chaos")

FAN_OUT = 4
DAG_NODES = ("root", *(f"fan-{i}" for i in range(FAN_OUT)), "join")
JOB_CHUNK = 500


def job_id(n: int) -> str:
    return f"chaos-j-{n}"


def dag_id(n: int) -> str:
    return f"chaos-dag-{n}"


def durable_id(n: int) -> str:
    return f"chaos-d-{n}"


def dag(n: int) -> Workflow:
    """root → fan-0 … fan-3 → join."""
    fans = [f"fan-{i}" for i in range(FAN_OUT)]
    flow = Workflow(dag_id(n)).add("root", chaos_node.envelope(workflow=n, node="root"), [])
    for name in fans:
        flow = flow.add(name, chaos_node.envelope(workflow=n, node=name), ["root"])
    return flow.add("join", chaos_node.envelope(workflow=n, node="join"), fans)


def _job_envelope(n: int) -> Envelope:
    return dataclasses.replace(chaos_job.envelope(n=n), id=job_id(n))


@dataclasses.dataclass
class Workload:
    jobs: int
    dags: int
    durables: int
    sent: int = 0  # items of plan() already enqueued
    retries: int = 0  # waves sent again after a database error

    def plan(self) -> list[tuple[str, int]]:
        """Every item, the three kinds interleaved so each wave carries some of each."""
        total = max(self.jobs, self.dags, self.durables, 1)
        items: list[tuple[str, int]] = []
        for kind, count in (("job", self.jobs), ("dag", self.dags), ("durable", self.durables)):
            items += [(kind, n) for n in range(count)]
        ranks = {"job": self.jobs, "dag": self.dags, "durable": self.durables}
        return sorted(items, key=lambda item: (item[1] / ranks[item[0]] * total, item[0]))

    @property
    def total(self) -> int:
        return self.jobs + self.dags + self.durables

    def send_until(self, fraction: float) -> None:
        """Enqueue the plan up to ``fraction`` of it; on a database error, leave the rest
        for the next call (which sends the failed wave again)."""
        plan = self.plan()
        goal = min(len(plan), int(len(plan) * fraction))
        while self.sent < goal:
            wave = list(_wave(plan, self.sent, goal))
            try:
                _send(wave)
            except DatabaseError as exc:
                self.retries += 1
                log.warning("enqueue failed (%s); sending the wave again later", exc)
                connection.close()
                return
            self.sent += len(wave)


def _wave(plan: list[tuple[str, int]], start: int, goal: int) -> Iterator[tuple[str, int]]:
    jobs = 0
    for item in plan[start:goal]:
        yield item
        jobs += item[0] == "job"
        if item[0] != "job" or jobs >= JOB_CHUNK:
            return


def _send(wave: list[tuple[str, int]]) -> None:
    jobs = [_job_envelope(n) for kind, n in wave if kind == "job"]
    if jobs:
        enqueue(jobs)
    for kind, n in wave:
        if kind == "dag":
            enqueue(dag(n).prepare())
        elif kind == "durable":
            client = durable.Client()
            wid = client.start(
                "chaos-durable",
                "1",
                n,
                workflow_id=durable_id(n),
                business_idempotency_key=f"chaos:{n}",
            ).workflow_id
            client.signal(wid, "go", f"go-{n}", message_id=f"go-{n}")

"""An Operation leased eagerly (on the pass's own thread) still keeps its queue's
admission ceiling.

Every other path into ``running`` on a governed queue goes through the governed claim,
which counts the queue's running jobs under its lock. The eager lease honoured a paused
queue but not a concurrency limit: an Operation whose queue was at its ceiling started at
once all the same, so ``set_concurrency_limit("payments", 1)`` let two charges run together.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.db import transaction

from headgate_django import Envelope, admission, enqueue, store
from headgate_django.envelope import internal
from headgate_django.models import Job
from headgate_django.store import vendor as v
from headgate_django.store.durable_jobs import (
    EagerLease,
    operation_envelope,
    operation_insert,
    operation_lease,
)

pytestmark = pytest.mark.django_db

QUEUE = "capped-ops"
LEASE = timedelta(minutes=5)


def _lease_pending_operation() -> object:
    envelope = operation_envelope(
        "exec-1",
        command_id="1",
        name="it-step",
        version="1",
        input=1,
        execution_key="exec-1:op:1",
        queue=QUEUE,
        max_attempts=3,
    )
    envelope = internal(dataclasses.replace(envelope, pending=True))
    conn = v.connection_for("default")
    with transaction.atomic(), conn.cursor() as cursor:
        operation_insert(conn, [envelope])  # as the pass that schedules it does
        return operation_lease(cursor, conn, envelope, EagerLease(envelope.id, "w-eager", LEASE))


def test_an_eager_lease_does_not_pass_a_full_concurrency_ceiling():
    admission.set_concurrency_limit(QUEUE, 1)
    enqueue(Envelope(kind="test.noop", queue=QUEUE))
    assert len(store.job_claim(worker_id="w1", limit=5, lease_ttl=LEASE, queues=[QUEUE])) == 1

    assert _lease_pending_operation() is None  # left for the governed claim
    assert Job.objects.filter(queue=QUEUE, state="running").count() == 1
    assert Job.objects.get(pk="exec-1:op:1").state == "available"


def test_an_eager_lease_still_runs_at_once_on_an_ungoverned_queue():
    leased = _lease_pending_operation()
    assert leased is not None
    assert Job.objects.get(pk="exec-1:op:1").state == "running"

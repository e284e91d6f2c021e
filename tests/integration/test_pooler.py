"""Behind a transaction-pooling proxy (PgBouncer; the leg ``make test-pgbouncer`` runs
these): a ``LISTEN`` cannot reach a worker through it. A worker proves its wake-ups work
before it relies on them, says so once when they do not and polls instead; with
``HEADGATE["LISTEN_USING"]`` naming a direct alias it keeps them (``test_notify`` runs
with that alias in this leg). The rest of the integration suite runs through the proxy
unchanged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import Error
from django.test import override_settings

from headgate_django import Envelope, enqueue
from headgate_django.checks import check_settings
from headgate_django.exceptions import DuplicateError
from headgate_django.models import Job
from tests.app import tasks
from tests.conftest import POOLER_BYPASS, wait_for
from tests.integration.helpers import headgate_env, job, state_is

WARNING = "LISTEN/NOTIFY does not reach this worker"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not POOLER_BYPASS, reason="runs behind PgBouncer (make test-pgbouncer)")
def test_listen_through_the_pooler_is_found_out_and_the_worker_polls(start_worker):
    worker = start_worker(env=headgate_env(LISTEN_USING=None))
    wait_for(lambda: WARNING in worker.output(), timeout=60)
    assert worker.output().count(WARNING) == 1
    job_id = tasks.record_run.enqueue(label="through the pooler")
    wait_for(lambda: state_is(job_id, "completed"))
    row = job(job_id)
    assert row.claimed_at - row.enqueued_at < timedelta(seconds=3)  # IDLE_BACKOFF_MAX: 2 s
    assert worker.terminate() == 0


def test_listen_using_must_name_a_database_alias():
    with override_settings(HEADGATE={"LISTEN_USING": "nowhere"}):
        (error,) = [e for e in check_settings() if e.id == "headgate.E011"]
    assert isinstance(error, Error) and "'nowhere'" in error.msg
    with override_settings(HEADGATE={"LISTEN_USING": "default"}):
        assert not [e for e in check_settings() if e.id == "headgate.E011"]


@pytest.mark.django_db(transaction=True)
def test_a_pipelined_batch_goes_through_the_pooler_whole_or_not_at_all():
    """PostgreSQL sends a batch as a pipeline of statements (``store.insert``); behind a
    transaction pooler they stay on one server connection, and a refusal in the last one
    leaves nothing of the others."""
    plain = [tasks.noop.envelope() for _ in range(1000)]
    assert len(set(enqueue(plain))) == 1000
    [holder] = enqueue(Envelope(kind="test.noop", unique_key="pooled"))
    with pytest.raises(DuplicateError):
        enqueue([*plain[1:], Envelope(kind="test.noop", unique_key="pooled")])
    assert Job.objects.count() == 1001
    assert Job.objects.get(unique_key="pooled").id == holder

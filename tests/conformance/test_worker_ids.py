"""Two processes given one ``--worker-id`` (a copy-pasted unit file, say): their job leases
were always apart (each lease id has a random tail), but both held every maintenance duty
the id held, and their registry rows overwrite each other."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from headgate_django import store
from headgate_django.store.workers import Beat, worker_heartbeat
from headgate_django.worker.runner import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_workers_given_one_id_never_both_hold_a_duty():
    first, second = Worker(worker_id="twin"), Worker(worker_id="twin")
    assert first._duties is not None and second._duties is not None
    ttl = timedelta(minutes=1)
    assert store.duty_acquire("reclaim", holder=first._duties.holder, ttl=ttl)
    assert not store.duty_acquire("reclaim", holder=second._duties.holder, ttl=ttl)


def test_a_worker_given_the_id_of_a_live_worker_says_so(caplog):
    worker_heartbeat(Beat("twin", "elsewhere", 1, None, 10, timedelta(seconds=5)))
    with caplog.at_level(logging.WARNING, logger="headgate_django.worker"):
        Worker(worker_id="twin", queues=["twin-q"], burst=True, run_duties=False).run()
    assert any("another worker reports the id twin" in r.getMessage() for r in caplog.records), (
        caplog.text
    )


def test_a_worker_given_a_free_id_says_nothing_of_it(caplog):
    worker_heartbeat(
        Beat("stopped-twin", "elsewhere", 1, None, 10, timedelta(seconds=5)), stopped=True
    )
    with caplog.at_level(logging.WARNING, logger="headgate_django.worker"):
        for worker_id in ("stopped-twin", "never-seen"):
            Worker(worker_id=worker_id, queues=["twin-q"], burst=True, run_duties=False).run()
    assert "another worker reports" not in caplog.text

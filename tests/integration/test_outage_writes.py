"""How long a worker keeps writing an outcome the database refuses.

``tests/chaos/outage.py`` stops a real server; these pin the rule itself. A finished
handler's outcome is written again until it lands, however long the database is away
(its lease is not lost by lapsing during an outage), and only a stopping worker gives
up, at the end of its drain window.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import IntegrityError, OperationalError

from headgate_django.worker.runner import Worker


def refused_for(seconds: float):  # type: ignore[no-untyped-def]
    """A write the database refuses (a refused connection) for ``seconds``, then takes."""
    until = time.monotonic() + seconds
    calls = []

    def write() -> str:
        calls.append(time.monotonic())
        if time.monotonic() < until:
            raise OperationalError('(2002, "Can\'t connect to server")')
        return "written"

    return write, calls


def test_a_refused_write_is_retried_past_the_lease_ttl() -> None:
    worker = Worker(lease_ttl=timedelta(seconds=0.3), burst=True, run_duties=False)
    write, calls = refused_for(1.0)
    assert worker._persist(write, "a completion") == "written"
    assert len(calls) >= 4 and calls[-1] - calls[0] >= 0.9


def test_a_stopping_worker_gives_up_at_the_end_of_its_drain_window() -> None:
    worker = Worker(lease_ttl=timedelta(seconds=30), burst=True, run_duties=False)
    worker._drain_deadline = time.monotonic() + 0.5
    write, calls = refused_for(60.0)
    began = time.monotonic()
    with pytest.raises(OperationalError):
        worker._persist(write, "a completion")
    assert time.monotonic() - began < 1.0
    assert len(calls) >= 2


def test_other_database_errors_are_not_retried() -> None:
    worker = Worker(burst=True, run_duties=False)
    calls = []

    def write() -> None:
        calls.append(1)
        raise IntegrityError("duplicate key")

    with pytest.raises(IntegrityError):
        worker._persist(write, "an outcome")
    assert calls == [1]

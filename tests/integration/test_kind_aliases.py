"""A real ``runworkers`` process claims and runs jobs stored under an alias kind."""

from __future__ import annotations

import pytest

from headgate_django import Envelope, enqueue
from headgate_django.envelope import encode_call
from tests.integration.helpers import job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_worker_runs_rows_of_the_old_kind_with_the_new_handler(start_worker):
    ids = enqueue(
        [Envelope(kind="test.alias.old", payload=encode_call((), {"value": i})) for i in range(3)]
    )
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.proc.wait(timeout=120) == 0, worker.output()
    assert [job(i).state for i in ids] == ["completed"] * 3
    assert job(ids[2]).result == {"kind": "test.alias.old", "value": 2}
    assert "have no handler" not in worker.output()

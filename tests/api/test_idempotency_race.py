"""Two requests racing with one Idempotency-Key run the mutation once: the second waits
for the first's transaction (unique index, or SQLite's writer lock) and replays its
answer. Real threads and connections, so the test commits (``transaction=True``)."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from rest_framework.test import APIClient

from headgate_django.api.views import jobs as job_views
from headgate_django.models import IdempotencyRecord, Job
from tests.api.conftest import VIEW_PERMS, Api, _user


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_enqueue_once() -> None:
    user = _user("racer", [*VIEW_PERMS, "operate"])
    real_enqueue = job_views.enqueue_one

    def slow_enqueue(*args: Any, **kwargs: Any) -> Any:
        ids = real_enqueue(*args, **kwargs)
        time.sleep(0.3)  # hold the transaction open while the other request arrives
        return ids

    barrier = threading.Barrier(2)
    responses: list[Any] = []

    def send() -> None:
        client = APIClient()
        client.force_authenticate(user)
        barrier.wait()
        try:
            responses.append(Api(client).post("/api/v1/jobs", {"kind": "test.noop"}, key="race"))
        finally:
            connection.close()

    with mock.patch.object(job_views, "enqueue_one", slow_enqueue):
        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert [r.status_code for r in responses] == [201, 201]
    assert responses[0].content == responses[1].content
    assert sorted(r.has_header("Idempotent-Replayed") for r in responses) == [False, True]
    assert Job.objects.filter(kind="test.noop").count() == 1
    assert IdempotencyRecord.objects.count() == 1

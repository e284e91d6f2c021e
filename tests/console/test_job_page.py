"""The job page: its progress kept live over the page's socket (``JobConsumer``), and each
attempt's ``ctx.log`` entries with a level filter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client

from headgate_django import store, task, testing
from headgate_django.store.fenced import Completion, job_save_progress
from tests.conformance.helpers import LONG, WORKER, enqueue_job
from tests.console.test_consumers import communicator


@task(kind="test.console.logs")
def logs_twice(ctx):
    ctx.log.debug("quiet detail", step=1)
    ctx.log.error("loud <failure>", code=502)


def claimed_job() -> tuple[str, Any]:
    job_id = enqueue_job()
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    return job_id, claimed


@pytest.mark.django_db(transaction=True)
def test_progress_reaches_an_open_page_without_a_reload(viewer: Any) -> None:
    job_id, claimed = claimed_job()

    async def scenario() -> None:
        comm = communicator(f"/ws/headgate/job/{job_id}/", viewer)
        assert (await comm.connect(timeout=10))[0] is True
        first = await comm.receive_json_from(timeout=10)
        assert "no progress reported" in first["snapshot"]["html"]
        assert 'data-state="running"' in first["snapshot"]["html"]
        progress = {"current": 3, "total": 8, "message": "page 3"}
        await database_sync_to_async(job_save_progress)(claimed.ref, progress)
        moved = await comm.receive_json_from(timeout=10)
        html = moved["snapshot"]["html"]
        assert 'data-current="3" data-total="8"' in html and "page 3" in html
        await database_sync_to_async(store.job_complete_many)([Completion(claimed.ref)])
        done = await comm.receive_json_from(timeout=10)
        assert 'data-state="completed"' in done["snapshot"]["html"]
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["anonymous", "staff_without_perms", "outsider"])
def test_the_job_socket_refuses_all_but_viewers(who: str, request: pytest.FixtureRequest) -> None:
    from django.contrib.auth.models import AnonymousUser

    user = AnonymousUser() if who == "anonymous" else request.getfixturevalue(who)
    job_id = enqueue_job()

    async def scenario() -> None:
        comm = communicator(f"/ws/headgate/job/{job_id}/", user)
        connected, code = await comm.connect(timeout=10)
        assert connected is False and code == 4403

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_missing_job_says_so(viewer: Any) -> None:
    async def scenario() -> None:
        comm = communicator("/ws/headgate/job/no-such-job/", viewer)
        assert (await comm.connect(timeout=10))[0] is True
        first = await comm.receive_json_from(timeout=10)
        assert "no longer exists" in first["snapshot"]["html"]
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db
def test_the_job_page_shows_each_attempts_logs_escaped(viewer: Any) -> None:
    job_id = logs_twice.enqueue()
    testing.run_one()
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/admin/headgate_django/job/{job_id}/change/").content.decode()
    assert 'data-attempt="1"' in page and "attempt #1 · success" in page
    assert 'data-level="debug"' in page and 'data-level="error"' in page
    assert "loud &lt;failure&gt;" in page and "<failure>" not in page
    assert "joblogs.js" in page and f'data-ws="/ws/headgate/job/{job_id}/"' in page


@pytest.mark.django_db
def test_a_job_that_logged_nothing_says_so(viewer: Any) -> None:
    job_id = enqueue_job()
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/admin/headgate_django/job/{job_id}/change/").content.decode()
    assert "no attempt logged anything" in page


@pytest.mark.django_db
def test_a_bulk_jobs_page_shows_its_progress(viewer: Any) -> None:
    from django.test import override_settings

    from headgate_django import bulk
    from headgate_django.kernel.states import State
    from tests.conformance.helpers import fresh_queue, job_in_state

    q = fresh_queue()
    for _ in range(3):
        job_in_state(State.ARCHIVED, queue=q)
    with override_settings(HEADGATE={"BULK_SYNC_LIMIT": 2}):
        job_id = bulk.perform("retry", expected_count=3, queue=q).job_id
    testing.run_one(queues=["headgate-bulk"])
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/admin/headgate_django/job/{job_id}/change/").content.decode()
    assert 'data-current="3" data-total="3"' in page and "retry: 3 changed" in page


@pytest.mark.django_db(transaction=True)
def test_open_pages_of_two_jobs_each_show_their_own(viewer: Any) -> None:
    """The job pages' sockets share reads per view: the job is part of the view."""
    running, _ = claimed_job()
    waiting = enqueue_job()
    pages = [(running, "running"), (waiting, "available")] * 2

    async def scenario() -> None:
        comms = [communicator(f"/ws/headgate/job/{job_id}/", viewer) for job_id, _ in pages]
        opened = await asyncio.gather(*(comm.connect(timeout=10) for comm in comms))
        assert all(connected for connected, _ in opened)
        for comm, (job_id, state) in zip(comms, pages, strict=True):
            html = (await comm.receive_json_from(timeout=10))["snapshot"]["html"]
            assert f'data-state="{state}"' in html, (job_id, html)
            await comm.disconnect()

    async_to_sync(scenario)()

"""The job list's cells and its live first page (the socket and the page's wiring); the
layout at 1366 px is checked in a real browser (test_browser_lists.py)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser
from django.test import Client
from django.urls import reverse

from headgate_django import enqueue, testing
from headgate_django.console import joblist
from tests.app import tasks
from tests.console.test_consumers import communicator


def test_ids_keep_head_and_tail_and_kinds_lose_an_unambiguous_module_path() -> None:
    assert joblist.short_id("01JF0000000000000000K3Q8ZB") == "01JF…00K3Q8ZB"
    assert joblist.short_id("short-id") == "short-id"
    assert joblist.short_kind("test.echo") == "echo"  # registered, one "echo"
    assert joblist.short_kind("headgate:workflow") == "workflow"
    assert joblist.short_kind("not.registered.echo") == "not.registered.echo"
    assert joblist.short_kind("plain") == "plain"
    cell = str(joblist.id_cell("01JF0000000000000000K3Q8ZB", "/x/"))
    assert 'title="01JF0000000000000000K3Q8ZB"' in cell
    assert 'data-copy="01JF0000000000000000K3Q8ZB"' in cell


@pytest.mark.django_db
def test_only_the_first_page_in_the_default_order_is_live(viewer: Any) -> None:
    enqueue(tasks.echo.envelope(value=1))
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:headgate_django_job_changelist")
    first = client.get(url, {"state__exact": "available", "q": "test."}).content.decode()
    assert 'data-ws="/ws/headgate/jobs/?state__exact=available&amp;q=test."' in first
    assert "test.echo" in first and ">echo<" in first  # short kind, full one on hover
    for query in ({"p": "2"}, {"o": "1"}):
        assert "data-ws=" not in client.get(url, query).content.decode(), query


@pytest.mark.django_db(transaction=True)
def test_the_socket_says_changed_when_a_job_joins_the_first_page(viewer: Any) -> None:
    async def scenario() -> None:
        comm = communicator("/ws/headgate/jobs/?state__exact=available", viewer)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        assert (await comm.receive_json_from(timeout=10))["type"] == "snapshot"
        from channels.db import database_sync_to_async

        await database_sync_to_async(enqueue)(tasks.echo.envelope(value=2))
        assert await comm.receive_json_from(timeout=10) == {"type": "changed"}
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "path",
    [
        "/ws/headgate/jobs/?state__exact=bogus",
        "/ws/headgate/jobs/?q=" + "x" * 300,
    ],
)
def test_bad_filters_are_refused(viewer: Any, path: str) -> None:
    async def scenario() -> None:
        connected, code = await communicator(path, viewer).connect(timeout=5)
        assert (connected, code) == (False, 4403)

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["anonymous", "outsider", "staff_without_perms"])
def test_everyone_but_staff_is_refused(who: str, request: pytest.FixtureRequest) -> None:
    user = AnonymousUser() if who == "anonymous" else request.getfixturevalue(who)

    async def scenario() -> None:
        connected, code = await communicator("/ws/headgate/jobs/", user).connect(timeout=5)
        assert (connected, code) == (False, 4403)

    async_to_sync(scenario)()


@pytest.mark.django_db
def test_job_detail_shows_attempts_as_a_timeline_and_no_payload(viewer: Any) -> None:
    (job_id,) = enqueue(tasks.flaky.envelope(succeed_on=2))
    testing.run_jobs(include_scheduled=True, max_jobs=5)
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("admin:headgate_django_job_change", args=[job_id])).content.decode()
    timeline = page[page.index('<ol class="hg-attempts">') :]
    timeline = timeline[: timeline.index("</ol>")]
    assert "#1 failed" in timeline and "#2 succeeded" in timeline
    assert timeline.count("claimed 20") == 2  # both attempts know when they were claimed
    assert "worker <code>—</code>" not in timeline  # and by whom
    assert "<summary>traceback</summary>" in timeline and "Traceback" in timeline
    assert "succeed_on" not in page  # the payload needs the reveal permission

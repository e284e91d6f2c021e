"""The overview dashboard and the workers page: staff only with the view permission of what
they show, read-only, every number linking to the list behind it, and live over the
console socket (a change in the store reaches an open page with no reload)."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from headgate_django.console import dashboard
from headgate_django.console.chart import minute_chart
from headgate_django.console.consumers import LiveConsumer
from headgate_django.store.operator import queue_set_paused
from headgate_django.store.workers import Beat, queue_minutes_add, worker_heartbeat
from tests.conformance.helpers import enqueue_job
from tests.console.conftest import make_user
from tests.console.test_admin import mutation_controls
from tests.console.test_consumers import communicator, counting_calls, open_pages

OVERVIEW = "admin:headgate_django_overview"
WORKERS = "admin:headgate_django_workers"


def register(worker_id: str, **kw: Any) -> None:
    stopped = kw.pop("stopped", False)
    heartbeat = kw.pop("heartbeat", 5.0)
    beat = Beat(
        worker_id, "host-a", 42, kw.pop("queues", None), 4, timedelta(seconds=heartbeat), **kw
    )
    worker_heartbeat(beat, stopped=stopped)


def get(user: Any, name: str) -> Any:
    client = Client()
    client.force_login(user)
    return client.get(reverse(name))


def links_of(html: str) -> list[dict[str, list[str]]]:
    return [
        parse_qs(urlsplit(unquote(href.replace("&amp;", "&"))).query)
        for href in re.findall(r'href="([^"]*/job/\?[^"]*)"', html)
    ]


@pytest.mark.django_db
def test_overview_shows_depth_ages_the_hour_and_in_flight_with_links(viewer: Any) -> None:
    enqueue_job(queue="mail")
    enqueue_job(queue="mail")
    queue_minutes_add({"mail": (5, 1, 2)})
    register("w-busy", in_flight=3, in_flight_by_queue={"mail": 3})
    register("w-dead", in_flight=1, in_flight_by_queue={"mail": 1}, heartbeat=0.01)
    time.sleep(0.05)  # w-dead misses its beats: gone workers hold nothing on the dashboard
    response = get(viewer, OVERVIEW)
    assert response.status_code == 200
    html = response.content.decode()
    assert mutation_controls(html) == []
    section = re.search(r'<section class="hg-queue" data-queue="mail".*?</section>', html, re.S)
    assert section, html
    mail = section.group(0)
    assert 'data-state="available" data-n="2"' in mail
    assert "Oldest available" in mail and "data-oldest=" in mail
    assert 'data-series="completed" data-n="5"' in mail
    assert 'data-series="failed" data-n="1"' in mail
    assert 'data-series="retried" data-n="2"' in mail
    assert '<svg class="hg-chart"' in mail and "5 completed, 1 failed, 2 retried" in mail
    assert 'data-worker="w-busy" data-n="3"' in mail and "w-dead" not in mail
    found = links_of(mail)
    assert {"queue__exact": ["mail"], "state__exact": ["available"]} in found
    assert {"queue__exact": ["mail"], "state__exact": ["archived"]} in found
    assert {
        "queue__exact": ["mail"],
        "state__exact": ["running"],
        "claimed_by__exact": ["w-busy"],
    } in found
    # The lists behind the numbers open (the admin allows these filters).
    client = Client()
    client.force_login(viewer)
    for query in found:
        url = (
            reverse("admin:headgate_django_job_changelist")
            + "?"
            + "&".join(f"{k}={v[0]}" for k, v in query.items())
        )
        assert client.get(url).status_code == 200, url


@pytest.mark.django_db
def test_overview_is_the_console_landing_page(viewer: Any) -> None:
    index = get(viewer, "admin:index").content.decode()
    module = re.search(r'id="headgate-console-module".*?</div>', index, re.S).group(0)
    overview = reverse(OVERVIEW)
    assert f'<caption><a href="{overview}"' in module
    assert re.findall(r'<a href="([^"]+)">', module)[0] == overview
    tabs = re.search(r'<nav class="hg-tabs".*?</nav>', get(viewer, OVERVIEW).content.decode(), re.S)
    assert re.findall(r'href="([^"]+)"', tabs.group(0))[0] == overview
    assert reverse(WORKERS) in tabs.group(0)


@pytest.mark.django_db
def test_workers_page_lists_live_gone_and_stopped(viewer: Any) -> None:
    register("w-live", queues=["default", "mail"], in_flight=2, claimed=10, completed=8)
    register("w-stopped", stopped=True)
    register("w-gone", heartbeat=0.01)
    time.sleep(0.05)
    response = get(viewer, WORKERS)
    assert response.status_code == 200
    html = response.content.decode()
    assert mutation_controls(html) == []
    rows = re.findall(r'<tr data-worker="([^"]+)" data-status="([^"]+)"', html)
    assert rows == [("w-live", "live"), ("w-gone", "gone"), ("w-stopped", "stopped")]
    assert "1 live · 1 gone · 1 stopped" in html
    live = re.search(r'<tr data-worker="w-live".*?</tr>', html, re.S).group(0)
    for text in (
        "host-a",
        ">42<",
        "default, mail",
        '"in_flight">2<',
        '"claimed">10<',
        '"completed">8<',
    ):
        assert text in live, text


@pytest.mark.django_db
def test_pages_need_staff_and_the_view_permission_of_what_they_show(
    outsider: Any, staff_without_perms: Any
) -> None:
    jobs_only = make_user("jobs-only", staff=True, perms=["view_job"])
    for name in (OVERVIEW, WORKERS):
        for user in (outsider,):
            response = get(user, name)
            assert response.status_code == 302 and "/login/" in response["Location"]
        assert get(staff_without_perms, name).status_code == 403
    assert get(jobs_only, OVERVIEW).status_code == 200
    assert get(jobs_only, WORKERS).status_code == 403
    # Without view_worker the dashboard leaves the worker column out.
    register("w-busy", in_flight=1, in_flight_by_queue={"default": 1})
    enqueue_job(queue="default")
    assert "In flight per worker" not in get(jobs_only, OVERVIEW).content.decode()
    client = Client()
    client.force_login(jobs_only)
    assert client.post(reverse(OVERVIEW)).status_code == 403


def test_the_chart_scales_to_the_busiest_minute_and_says_its_totals() -> None:
    rows = [(100, 0, 0, 0), (101, 4, 0, 0), (102, 1, 1, 2)]
    svg = minute_chart("q<1>", rows)
    assert 'data-peak="4"' in svg and "q&lt;1&gt;" in svg and "q<1>" not in svg
    assert "last 3 minutes: 5 completed, 1 failed, 2 retried" in svg
    assert svg.count("<title>") == 2  # the empty minute has no bar
    assert 'height="72.0"' in svg  # the busiest minute fills the height
    assert "<rect" not in minute_chart("q", [(1, 0, 0, 0)])


@pytest.mark.django_db(transaction=True)
def test_the_sockets_send_the_pages_again_when_the_store_changes(viewer: Any) -> None:
    enqueue_job(queue="live-q")

    async def scenario() -> None:
        for path, change, expect in (
            (
                "/ws/headgate/overview/",
                lambda: queue_minutes_add({"live-q": (7, 0, 0)}),
                'data-series="completed" data-n="7"',
            ),
            ("/ws/headgate/workers/", lambda: register("w-new"), 'data-worker="w-new"'),
        ):
            comm = communicator(path, viewer)
            connected, _ = await comm.connect(timeout=10)
            assert connected, path
            first = await comm.receive_json_from(timeout=10)
            assert first["type"] == "snapshot" and expect not in first["snapshot"]["html"]
            await database_sync_to_async(change)()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5
            while True:
                message = await comm.receive_json_from(timeout=max(0.01, deadline - loop.time()))
                if expect in message["snapshot"]["html"]:
                    break
            await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_the_sockets_refuse_who_may_not_see_the_page(outsider: Any) -> None:
    jobs_only = make_user("jobs-only", staff=True, perms=["view_job"])

    async def scenario() -> None:
        for user, path in (
            (AnonymousUser(), "/ws/headgate/overview/"),
            (outsider, "/ws/headgate/overview/"),
            (outsider, "/ws/headgate/workers/"),
            (jobs_only, "/ws/headgate/workers/"),
        ):
            comm = communicator(path, user)
            connected, code = await comm.connect(timeout=5)
            assert (connected, code) == (False, 4403), (user, path)

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_an_open_overview_redraws_without_workers_once_view_worker_is_revoked(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker column was decided at connect only: a page left open kept showing the
    workers and what each held after its user lost ``view_worker``."""
    monkeypatch.setattr(LiveConsumer, "recheck_interval", 0.2)
    register("w-held", in_flight=1, in_flight_by_queue={"default": 1})
    enqueue_job(queue="default")

    def revoke() -> None:
        viewer.user_permissions.remove(viewer.user_permissions.get(codename="view_worker"))

    async def scenario() -> None:
        comm = communicator("/ws/headgate/overview/", viewer)
        assert (await comm.connect(timeout=5))[0]
        first = await comm.receive_json_from(timeout=10)
        assert 'data-worker="w-held"' in first["snapshot"]["html"]
        await database_sync_to_async(revoke)()
        # The page is redrawn every second (the oldest job ages): read until the close.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        output = await comm.receive_output(timeout=5)
        while output["type"] != "websocket.close":
            output = await comm.receive_output(timeout=max(0.01, deadline - loop.time()))
        assert output["code"] == 4000
        fresh = await database_sync_to_async(type(viewer).objects.get)(pk=viewer.pk)
        again = communicator("/ws/headgate/overview/", fresh)
        assert (await again.connect(timeout=5))[0]
        html = (await again.receive_json_from(timeout=10))["snapshot"]["html"]
        assert "In flight per worker" not in html and "w-held" not in html
        await again.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db
def test_the_overview_draws_a_bounded_number_of_queues_and_says_how_many_more(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its socket reads and sends the page again every second: each queue cost a query or
    two and a chart, so thousands of queue names made every poll seconds of reads and
    megabytes sent. It draws the first queues by name, and its reads do not grow with
    the queues it does not draw."""
    monkeypatch.setattr(dashboard, "OVERVIEW_QUEUES", 3)

    def reads() -> int:
        """Reads of the job table (the others' count varies with a minute's cache)."""
        with CaptureQueriesContext(connection) as queries:
            dashboard.overview_data()
        return sum("headgate_job" in q["sql"] for q in queries.captured_queries)

    for i in range(5):
        enqueue_job(queue=f"a-{i:02d}")
    few = reads()
    for i in range(5, 40):
        enqueue_job(queue=f"a-{i:02d}")
    queue_minutes_add({"z-only-in-the-chart": (1, 0, 0)})
    assert reads() == few
    html = get(viewer, OVERVIEW).content.decode()
    drawn = re.findall(r'<section class="hg-queue" data-queue="([^"]+)"', html)
    assert drawn == ["a-00", "a-01", "a-02"]
    shown_or_not = 40 + 1 + len(dashboard.registered_queues())
    assert f'data-more="{shown_or_not - 3}"' in html


@pytest.mark.django_db
def test_the_overview_flags_a_queue_with_available_jobs_that_no_live_worker_serves(
    viewer: Any,
) -> None:
    """`runworkers --queue default` leaves a workflow's coordinator queue (or any other)
    unserved: its jobs waited with nothing said."""
    queues = ("mail", "reports", "halted", "idle")
    for queue in queues:
        enqueue_job(queue=queue)
    queue_set_paused("halted", True)
    register("w-mail", queues=["mail"])
    register("w-gone", queues=["reports"], heartbeat=0.01)
    time.sleep(0.05)  # w-gone misses its beats: it serves nothing any more

    def flagged(user: Any) -> set[str]:
        html = get(user, OVERVIEW).content.decode()
        found = set()
        for name in queues:
            heading = re.search(
                rf'<section class="hg-queue" data-queue="{name}".*?</h2>', html, re.S
            )
            assert heading, (name, html)
            if "no live worker serves it" in heading.group(0):
                found.add(name)
        return found

    # reports has only a gone worker, idle none; halted is paused (its heading says so).
    assert flagged(viewer) == {"reports", "idle"}
    register("w-all")  # no --queue: every queue
    assert flagged(viewer) == set()
    # Who may not see the workers is not told what they serve.
    register("w-all", stopped=True)
    assert flagged(viewer) == {"reports", "idle"}
    viewer.user_permissions.remove(viewer.user_permissions.get(codename="view_worker"))
    assert flagged(type(viewer).objects.get(pk=viewer.pk)) == set()


async def open_overviews(users: list[Any]) -> list[tuple[Any, str]]:
    """An overview socket per user, opened all at once; each with its first fragment."""
    opened = await open_pages("/ws/headgate/overview/?site=admin", users)
    return [(comm, first["html"]) for comm, first in opened]


@pytest.mark.django_db(transaction=True)
def test_open_overviews_share_one_read_per_poll_however_many_there_are(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each open overview socket read the whole overview every second on the process's one
    thread for ORM calls: with 15-20 open, a new socket's handshake (whose session reads
    wait for that thread) timed out. The sockets of one view share a read per poll."""
    reads = counting_calls(monkeypatch, "overview_data")
    enqueue_job(queue="shared-q")  # the oldest available job ages: a new page every poll
    polls = 2  # of a second each

    async def scenario() -> tuple[int, int, list[int]]:
        comms = [comm for comm, _ in await open_overviews([viewer] * 12)]
        at_connect = len(reads)
        reads.clear()
        await asyncio.sleep(polls)
        during = len(reads)
        updates = []
        for comm in comms:
            updates.append(0)
            while not await comm.receive_nothing(timeout=0.01):
                updates[-1] += (await comm.receive_json_from())["type"] == "snapshot"
            await comm.disconnect()
        return at_connect, during, updates

    at_connect, during, updates = async_to_sync(scenario)()
    assert during <= polls + 2, f"{during} overview reads in {polls} polls of 12 sockets"
    assert at_connect <= 2, f"{at_connect} overview reads for 12 sockets opened together"
    assert min(updates) >= 1, updates  # and every socket was sent the new pages


@pytest.mark.django_db(transaction=True)
def test_overviews_of_different_views_each_show_their_own(viewer: Any) -> None:
    """Shared reads are per view: a socket whose user lacks ``view_worker`` never gets the
    worker column read for another socket, opened at the same time, whose user has it."""
    register("w-held", in_flight=1, in_flight_by_queue={"default": 1})
    enqueue_job(queue="default")
    jobs_only = make_user("jobs-only", staff=True, perms=["view_job"])

    async def scenario() -> None:
        opened = await open_overviews([viewer, jobs_only, viewer, jobs_only])
        await asyncio.sleep(2.5)  # the pages are drawn again meanwhile (the oldest job ages)
        for (comm, html), user in zip(opened, [viewer, jobs_only] * 2, strict=True):
            shown = [html]
            while not await comm.receive_nothing(timeout=0.01):
                shown.append((await comm.receive_json_from())["snapshot"]["html"])
            assert len(shown) > 1
            for page in shown:
                workers = 'data-worker="w-held"' in page and "In flight per worker" in page
                assert workers is (user is viewer), (user.username, page)
            await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_views_shared_reads_end_with_its_last_socket(viewer: Any, reader: Any) -> None:
    from headgate_django.console import shared

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        def views() -> int:
            return sum(held_loop is loop for held_loop, _ in shared._entries)

        opened = await open_overviews([viewer, reader, viewer])
        workers = communicator("/ws/headgate/workers/", viewer)
        assert (await workers.connect(timeout=10))[0]
        await workers.receive_json_from(timeout=10)
        assert views() == 3  # the viewer's overview, the reader's, the workers page
        await workers.disconnect()
        await opened[0][0].disconnect()
        await asyncio.sleep(0.05)
        assert views() == 2
        for comm, _ in opened[1:]:
            await comm.disconnect()
        await asyncio.sleep(0.05)
        assert views() == 0

    async_to_sync(scenario)()

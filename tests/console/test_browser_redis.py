"""Past one ASGI process: two servers of the sample project behind one Redis channel layer.

Two Daphne processes (``REDIS_URL`` makes the sample project use ``channels_redis``) each
serve a staff user's page of the same running workflow in Chromium. Worker processes
finish its nodes one at a time; each change must reach **both** pages within 2 s of its
commit. With a Redis layer a page only polls every ``idle_interval`` (5 s) unless a
worker's publish wakes it, and the three commits are at least 1.5 s apart (3 s from the
first to the last), so three on time on both pages cannot come from polling: they prove
the publish crossed Redis to each server's consumers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from headgate_django import enqueue, testing
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.console.test_browser import (  # noqa: F401  (fixtures)
    LIVE_WITHIN,
    Server,
    browser,
    job_state,
    started,
    wait_db,
)
from tests.console.test_browser_lists import login
from tests.console.test_consumers import REDIS_URL, _redis_reachable

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not _redis_reachable(), reason="needs channels-redis and a Redis server (REDIS_URL)"
    ),
    # What it shows is the channel layer's, whatever the database: the SQLite leg runs it.
    pytest.mark.skipif(
        bool(os.environ.get("DATABASE_URL")), reason="runs on the SQLite leg (see docstring)"
    ),
]
NODES = ("first", "second", "third")


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        for n in (1, 2):
            (tmp_path / f"server-{n}").mkdir()
            servers.append(started(Server(tmp_path / f"server-{n}", env={"REDIS_URL": REDIS_URL})))
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.mark.django_db(transaction=True)
def test_a_change_reaches_pages_on_two_asgi_servers_through_redis(
    two_servers: list[Server],
    browser: Any,  # noqa: F811  (the fixture)
    start_worker: Callable[..., Any],
    viewer: Any,
) -> None:
    flow = Workflow("two-servers")
    for name in NODES:  # each in a queue of its own, so one worker finishes one node
        flow.add(name, replace(tasks.echo.envelope(value=name), queue=f"redis-{name}"), [])
    enqueue(flow.prepare())
    testing.run_one(queues=["headgate-workflow"])  # the first tick: the nodes are available

    pages = []
    for server in two_servers:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        login(page, server)
        page.goto(f"{server.url}/admin/headgate_django/job/workflows/two-servers/graph/")
        page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
        page.evaluate("window.__sameDocument = true")
        pages.append(page)

    worker_env = {"HEADGATE_TEST_REDIS_URL": REDIS_URL, "HEADGATE_TEST_REDIS_PREFIX": "asgi"}
    committed = 0.0
    for name in NODES:
        time.sleep(max(0.0, committed + 1.5 - time.monotonic()))
        node = f'[data-node="{name}"]'
        assert all(page.get_attribute(node, "data-state") == "available" for page in pages)
        start_worker("--burst", "--queue", f"redis-{name}", env=worker_env)
        committed = wait_db(lambda name=name: job_state(f"two-servers:{name}") == "completed")
        for n, page in enumerate(pages, 1):
            left = max(0.05, LIVE_WITHIN - (time.monotonic() - committed))
            page.wait_for_selector(f'{node}[data-state="completed"]', timeout=left * 1000)
            late = time.monotonic() - committed
            assert late < LIVE_WITHIN, f"server {n} showed {name} {late:.2f} s after its commit"
    assert all(page.evaluate("window.__sameDocument === true") for page in pages)

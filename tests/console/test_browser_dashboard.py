"""The overview dashboard and the workers page in Debian's headless Chromium, against the
sample project served by Daphne, with real ``runworkers`` processes.

- The dashboard follows jobs a worker completes: the queue's depth moves within 2 s of the
  commit (the page polls its socket once a second) and the per-minute series follows
  after the worker's next flush, with no reload.
- The workers page shows a started worker live with its pid, then, after SIGKILL, gone
  (three missed heartbeats at the 0.5 s these workers beat at, plus the page's poll).
- A page opened while its user's other sockets hold every one the server allows says so
  and gets in once one of them closes.

Both tests save their screenshot into docs/img/, which docs/console.md shows, so the
pictures in the docs are the pages as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from headgate_django import enqueue
from headgate_django.models import Job
from tests.app import tasks
from tests.conftest import ROOT
from tests.console import test_browser as chromium
from tests.console.test_browser import LIVE_WITHIN, Server, wait_db
from tests.integration.helpers import headgate_env, wait_serving

pytestmark = [*chromium.pytestmark, pytest.mark.django_db(transaction=True)]
# The Daphne server and the Chromium of the other browser tests.
server = chromium.server
browser = chromium.browser
IMAGES = ROOT / "docs" / "img"
BEAT = 0.5
#: The per-minute series is flushed by the worker at most every second, then read by the
#: page's next poll: it may take one flush longer than the depth.
SERIES_WITHIN = LIVE_WITHIN + 2.0


def log_in(browser: Any, server: Server) -> Any:
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.goto(f"{server.url}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server.url}/admin/")
    return page


def completed_in(queue: str) -> int:
    return Job.objects.filter(queue=queue, state="completed").count()


def test_the_dashboard_follows_completions_live(
    server: Server, browser: Any, start_worker: Callable[..., Any], viewer: Any
) -> None:
    enqueue([replace(tasks.echo.envelope(value=i), queue="dash") for i in range(12)])
    enqueue([replace(tasks.noop.envelope(), queue="reports") for _ in range(3)])
    page = log_in(browser, server)
    page.click("#headgate-console-module caption a")  # the console's landing page
    page.wait_for_url("**/headgate_django/job/overview/")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    page.evaluate("window.__sameDocument = true")
    dash = '[data-queue="dash"]'
    assert page.get_attribute(f'{dash} [data-state="available"]', "data-n") == "12"

    start_worker("--burst", "--queue", "dash", env=headgate_env(WORKER_HEARTBEAT=BEAT))
    committed = wait_db(lambda: completed_in("dash") == 12)
    page.wait_for_selector(
        f'{dash} [data-state="completed"][data-n="12"]', timeout=LIVE_WITHIN * 1000
    )
    shown = time.monotonic()
    assert shown - committed < LIVE_WITHIN
    # The counts of one update come from separate statements, so a job that finished
    # between them may show in both for one update; the next one settles it.
    page.wait_for_selector(
        f'{dash} [data-state="available"]', state="detached", timeout=LIVE_WITHIN * 1000
    )
    page.wait_for_selector(
        f'{dash} [data-series="completed"][data-n="12"]', timeout=SERIES_WITHIN * 1000
    )
    assert page.locator(f"{dash} svg.hg-chart rect.hg-c-completed").count() >= 1
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert int(page.get_attribute("#hg-overview", "data-updates")) >= 1

    # A live worker's job in flight shows under its queue, linked to its running jobs.
    enqueue([replace(tasks.sleeper.envelope(seconds=60), queue="slow")])
    slow = start_worker("--queue", "slow", env=headgate_env(WORKER_HEARTBEAT=BEAT))
    held = '[data-queue="slow"] .hg-inflight [data-n="1"]'
    page.wait_for_selector(held, timeout=30_000)
    assert str(slow.pid) in page.get_attribute(held, "data-worker")
    assert "claimed_by__exact=" in page.get_attribute(held, "href")

    # Every number is a link to the list behind it, and that list opens.
    href = page.get_attribute(f'{dash} [data-state="completed"]', "href")
    assert "queue__exact=dash" in href and "state__exact=completed" in href
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    page.screenshot(path=str(IMAGES / "console-overview.png"), full_page=True)
    page.goto(f"{server.url}{href}")
    assert page.locator("#result_list tbody tr").count() == 12
    assert page.errors == []


def test_the_workers_page_shows_a_worker_then_its_disappearance(
    server: Server, browser: Any, start_worker: Callable[..., Any], viewer: Any
) -> None:
    env = headgate_env(WORKER_HEARTBEAT=BEAT)
    survivor = start_worker("--queue", "default", "--concurrency", "4", env=env)
    doomed = start_worker("--queue", "reports", "--concurrency", "2", env=env)
    wait_serving(survivor)
    wait_serving(doomed)
    page = log_in(browser, server)
    page.goto(f"{server.url}/admin/headgate_django/job/workers/")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    page.evaluate("window.__sameDocument = true")
    row = f'tr[data-pid="{doomed.pid}"]'
    page.wait_for_selector(f'{row}[data-status="live"]', timeout=15_000)
    page.wait_for_selector(f'tr[data-pid="{survivor.pid}"][data-status="live"]', timeout=15_000)
    assert "reports" in page.locator(row).inner_text()

    doomed.kill()
    killed = time.monotonic()
    # Gone once three beats are missed (1.5 s), seen at the page's next poll (1 s).
    page.wait_for_selector(f'{row}[data-status="gone"]', timeout=10_000)
    took = time.monotonic() - killed
    assert took < 3 * BEAT + LIVE_WITHIN + 1.0, took
    assert page.get_attribute(f'tr[data-pid="{survivor.pid}"]', "data-status") == "live"
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    page.screenshot(path=str(IMAGES / "console-workers.png"), full_page=True)
    assert page.errors == []


def test_a_page_past_the_socket_cap_says_so_and_gets_in_once_a_socket_closes(
    server: Server, browser: Any, viewer: Any
) -> None:
    """The user's other sockets hold every one the server allows (20, the default): the
    page is told so (4429) and, instead of reconnecting every few seconds, says why and
    tries again slowly, getting in once one of them closes."""
    holder = log_in(browser, server)
    # The held sockets watch one job's page, whose poll is a read by key: twenty overviews
    # redrawn every second on the server's one thread for ORM calls (a loaded CI machine,
    # PostgreSQL) left a later socket's handshake waiting past its timeout (1006). One
    # after another, for the same reason.
    held = enqueue(tasks.noop.envelope())
    opened = holder.evaluate(
        """async ([n, path]) => {
            const results = [];
            for (let i = 0; i < n; i++) {
                results.push(await new Promise((done) => {
                    const socket = new WebSocket(`ws://${location.host}${path}`);
                    (window.__held = window.__held || []).push(socket);
                    socket.onopen = () => done("open");
                    socket.onclose = (event) => done(event.code);
                }));
            }
            return results;
        }""",
        [20, f"/ws/headgate/job/{held}/"],
    )
    assert opened == ["open"] * 20
    page = log_in(browser, server)
    page.goto(f"{server.url}/admin/headgate_django/job/overview/")
    page.wait_for_selector("#hg-live[data-status='busy']", timeout=10_000)
    assert "too many console pages" in page.inner_text("#hg-live")
    holder.evaluate("window.__held[0].close()")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=40_000)
    assert page.errors == []

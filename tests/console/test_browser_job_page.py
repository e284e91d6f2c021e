"""The job page in headless Chromium against the sample project served by Daphne: the
progress a handler reports appears without a reload, and the attempt logs filter by level
in place."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import store, task, testing
from headgate_django.store.fenced import job_save_progress
from tests.conformance.helpers import LONG, WORKER, enqueue_job
from tests.console import test_browser as chromium
from tests.console.test_browser import LIVE_WITHIN, Server
from tests.console.test_browser_dashboard import log_in

pytestmark = [*chromium.pytestmark, pytest.mark.django_db(transaction=True)]
server = chromium.server
browser = chromium.browser


@task(kind="test.browser.logs")
def logs_levels(ctx):
    ctx.log.debug("chatter", n=1)
    ctx.log.info("fetched", rows=12)
    ctx.log.error("upstream failed", status=502)


def test_progress_moves_live_on_the_job_page(server: Server, browser: Any, viewer: Any) -> None:
    job_id = enqueue_job()
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    page = log_in(browser, server)
    page.goto(f"{server.url}/admin/headgate_django/job/{job_id}/change/")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    page.evaluate("window.__sameDocument = true")
    assert "no progress reported" in page.inner_text("#hg-job-progress")
    for current in (2, 5):
        job_save_progress(claimed.ref, {"current": current, "total": 10, "message": "pages"})
        page.wait_for_selector(
            f'#hg-job-progress [data-current="{current}"][data-total="10"]',
            timeout=(LIVE_WITHIN + 1) * 1000,
        )
    assert page.get_attribute("#hg-job-progress progress", "value") == "5"
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert page.errors == []


def test_attempt_logs_filter_by_level(server: Server, browser: Any, viewer: Any) -> None:
    job_id = logs_levels.enqueue()
    testing.run_one()
    page = log_in(browser, server)
    page.goto(f"{server.url}/admin/headgate_django/job/{job_id}/change/")
    rows = ".hg-attempt-log tr.hg-log"
    page.wait_for_selector(rows)
    assert page.locator(f"{rows}:visible").count() == 3
    page.select_option("select.hg-log-level", "warning")
    assert page.locator(f"{rows}:visible").count() == 1
    assert "upstream failed" in page.locator(f"{rows}:visible").inner_text()
    page.select_option("select.hg-log-level", "info")
    assert page.locator(f"{rows}:visible").count() == 2
    assert page.errors == []


def test_a_page_whose_websocket_never_opens_says_it_is_not_live(
    server: Server, browser: Any, viewer: Any
) -> None:
    """Served without the console's WebSocket (Django's own runserver, a WSGI server, an
    ASGI application without the console's routes), a live page says why it is not live
    instead of "Reconnecting…" for ever; it keeps trying, and is live once a socket opens."""
    job_id = enqueue_job()
    page = log_in(browser, server)
    refuse = {"on": True}

    def route(ws: Any) -> None:
        if refuse["on"]:
            ws.close()  # what the browser sees when nothing answers the upgrade
        else:
            ws.connect_to_server()

    page.route_web_socket("**/ws/**", route)
    page.goto(f"{server.url}/admin/headgate_django/job/{job_id}/change/")
    page.wait_for_selector("#hg-live[data-status='unreachable']", timeout=10_000)
    assert "ASGI" in page.inner_text("#hg-live")
    refuse["on"] = False
    page.wait_for_selector("#hg-live[data-status='live']", timeout=15_000)
    assert page.errors == []

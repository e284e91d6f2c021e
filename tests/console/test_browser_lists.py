"""The job and execution lists in headless Chromium at a laptop's 1366 px, and the job
list's live first page. Screenshots land in ``docs/img/`` (linked from docs/console.md),
so the pictures in the docs are the ones this test looked at."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.urls import reverse

from headgate_django import durable, enqueue, testing
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.conftest import ROOT
from tests.console.test_browser import (  # noqa: F401  (fixtures)
    LIVE_WITHIN,
    Server,
    browser,
    job_state,
    server,
    wait_db,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LAPTOP = {"width": 1366, "height": 800}
DOCS_IMG = ROOT / "docs" / "img"

#: Every element of the list that must be whole on screen: header cells, cells of every
#: row, and the state badges, ids and copy buttons inside them.
_CLIPPED = """(selector) => {
  const width = document.documentElement.clientWidth;
  const results = document.querySelector(".results");
  const right = results ? Math.min(width, results.getBoundingClientRect().right) : width;
  const bad = [];
  for (const el of document.querySelectorAll(selector)) {
    const box = el.getBoundingClientRect();
    if (box.width === 0) { bad.push(["hidden", el.className, el.textContent]); continue; }
    if (box.left < 0 || box.right > right + 0.5) {
      bad.push(["outside", el.className, el.textContent.trim(), box.left, box.right, right]);
    } else if (el.scrollWidth > el.clientWidth + 1 && el.tagName !== "SPAN") {
      bad.push(["cut", el.className, el.textContent.trim(), el.scrollWidth, el.clientWidth]);
    }
  }
  if (results && results.scrollWidth > results.clientWidth + 1) {
    bad.push(["table scrolls", results.scrollWidth, results.clientWidth]);
  }
  if (document.documentElement.scrollWidth > width + 1) {
    bad.push(["page scrolls", document.documentElement.scrollWidth, width]);
  }
  return bad;
}"""


def login(page: Any, server: Server) -> None:  # noqa: F811
    page.goto(f"{server.url}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server.url}/admin/")


def varied_jobs() -> None:
    """Jobs in several states, with ULID ids, workflow node ids and a long queue name."""
    enqueue(
        Workflow("nightly-warehouse-refresh-2026-12-02")
        .add("extract-customers", tasks.echo.envelope(value=1), [])
        .add("load-customers", tasks.echo.envelope(value=2), ["extract-customers"])
        .prepare()
    )
    for value in range(4):
        enqueue(tasks.echo.envelope(value=value))
    enqueue(tasks.always_fail.envelope(message="card declined"))
    testing.run_jobs(include_scheduled=True, max_jobs=20)
    enqueue(tasks.echo.envelope(value=99))  # one left available


@pytest.mark.django_db(transaction=True)
def test_the_job_list_fits_1366_px_and_follows_the_first_page(
    server: Server,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    viewer: Any,
) -> None:
    varied_jobs()
    page = browser.new_page(viewport=LAPTOP)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, server)
    page.goto(f"{server.url}/admin/headgate_django/job/")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    headers = page.locator("#result_list thead th").all_inner_texts()
    assert [h.strip().lower() for h in headers] == [
        "job",
        "kind",
        "queue",
        "state",
        "tries",
        "prio",
        "scheduled",
        "finished",
        "workflow",
    ]
    page.screenshot(path=str(DOCS_IMG / "job-list.png"))
    widths = page.evaluate(
        "[...document.querySelectorAll('#result_list thead th')].map(th => [th.className,"
        " Math.round(th.getBoundingClientRect().width)])"
    )
    bad = page.evaluate(_CLIPPED, "#result_list th, #result_list td, #result_list .hg-badge")
    assert bad == [], (bad, widths)
    states = page.locator("#result_list .hg-badge").all_inner_texts()
    assert {"completed", "archived", "available"} <= set(states)
    # A shortened id keeps the whole one in its title and its copy button.
    first = page.locator("#result_list .hg-copy").first
    full = first.get_attribute("data-copy")
    assert full and page.locator("#result_list .hg-id").first.get_attribute("title") == full
    page.screenshot(path=str(DOCS_IMG / "job-list.png"))

    # Live: a new job appears, then its state changes, without a reload.
    page.evaluate("window.__sameDocument = true")
    (job_id,) = enqueue(tasks.echo.envelope(value="live"))
    added = time.monotonic()
    page.wait_for_selector(f'#result_list .hg-copy[data-copy="{job_id}"]', timeout=10_000)
    assert time.monotonic() - added < LIVE_WITHIN + 1.5
    testing.run_jobs(max_jobs=5)
    committed = wait_db(lambda: job_state(job_id) == "completed")
    row = f'#result_list tr:has(.hg-copy[data-copy="{job_id}"]) .hg-badge'
    page.wait_for_function(
        f"document.querySelector('{row}')?.textContent === 'completed'", timeout=10_000
    )
    assert time.monotonic() - committed < LIVE_WITHIN + 1.5
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert page.evaluate(_CLIPPED, "#result_list th, #result_list td") == []

    # A later page is not live (rows would shift under the reader).
    page.goto(f"{server.url}/admin/headgate_django/job/?p=2")
    assert page.locator("#hg-live").count() == 0
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_the_execution_list_shows_its_timeline_link_at_1366_px(
    server: Server,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    viewer: Any,
) -> None:
    durable.Client().start(
        "console-ship", "1", {"order": 1}, business_idempotency_key="order-2026-12-02-0001"
    )
    page = browser.new_page(viewport=LAPTOP)
    login(page, server)
    page.goto(f"{server.url}/admin/headgate_django/execution/")
    link = page.locator("#result_list td.field-timeline a").first
    assert link.inner_text() == "timeline"
    bad = page.evaluate(_CLIPPED, "#result_list th, #result_list td")
    assert bad == [], bad
    box = link.bounding_box()
    assert box is not None and box["x"] + box["width"] <= LAPTOP["width"]


@pytest.mark.django_db(transaction=True)
def test_the_timeline_shows_a_pending_sleep_its_select_and_the_runs(
    server: Server,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    viewer: Any,
) -> None:
    """An execution that continued as new and now waits for a signal or an hour."""
    wf = durable.Client().start("console-rounds", "1", 1).workflow_id
    testing.run_jobs()
    view = durable.Manager().get(wf)
    assert view.run_number == 2
    page = browser.new_page(viewport=LAPTOP)
    login(page, server)
    page.goto(f"{server.url}{reverse('admin:headgate_django_execution_page', args=[wf])}")
    page.wait_for_selector("#hg-execution[data-ready='1']")
    sleep = page.locator("#hg-timers li.hg-sleep-pending")
    assert sleep.count() == 1
    text = sleep.inner_text()
    assert text.startswith("timer:1: 3600 s, pending") and " due 20" in text and "UTC" in text
    due = page.locator("#hg-timers .hg-due").inner_text()
    assert page.locator("#hg-waiting .hg-select").inner_text() == (
        "select:1 waits for the first of:"
    )
    branches = page.locator("#hg-waiting li.hg-branch")
    assert branches.all_inner_texts() == [
        "signal:stop:1 — signal 'stop' (wait 1)",
        f"timer:1 — sleep 3600 s,{due}",
    ]
    assert "within the thresholds" in page.locator("#hg-header").inner_text()
    runs = page.locator("#hg-runs li")
    assert runs.count() == 2
    assert "current" in runs.nth(1).inner_text()
    assert page.locator("#hg-family").inner_text() == "No parent, no children."
    previous = page.locator("#hg-runs li.hg-run a")
    assert previous.inner_text().startswith(f"run 1 ({wf}), 2 events, ended ")
    previous.click()
    page.wait_for_url("**/runhistoryevent/**")
    assert "run__id__exact=" in page.url  # the filter held (no redirect to ?e=1)
    assert "WorkflowContinuedAsNew" in page.locator("#result_list").inner_text()

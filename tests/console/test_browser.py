"""End to end in Debian's headless Chromium, against the sample project served by Daphne.

A staff user opens a running workflow's page; a worker in another process completes a
node; the page shows it within 2 s of the commit without reloading. The server is then
restarted and the page reconnects by itself and keeps following. Screenshots of the
dashboard, the live workflow and a 999-node graph are saved in the test's ``tmp_path``,
and the 999-node page's render time (data parsed → graph painted) is measured and
written to ``tmp_path / "console-timings.json"`` (see docs/benchmarks.md, "Console").
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from headgate_django import enqueue, testing
from headgate_django.models import Job
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.conftest import ROOT, database_url, free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LIVE_WITHIN = 2.0

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason="needs Debian's chromium (apt-get install chromium chromium-driver)",
    ),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")


class Server:
    """``manage.py runserver`` of the sample project: Daphne (ASGI), serving static files."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_dir = log_dir
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "sampleproject.settings",
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(ROOT),
            "DJANGO_DEBUG": "1",
            **self.env,
        }
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.starts += 1
        with (self.log_dir / f"daphne-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/admin/login/", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        log = (self.log_dir / f"daphne-{self.starts}.log").read_text(errors="replace")
        raise AssertionError(f"the server did not come up on port {self.port}:\n{log[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def started(running: Server) -> Server:
    """``running`` started, on a new free port if its first one was taken meanwhile."""
    for attempt in range(3):
        try:
            running.start()
            break
        except AssertionError:
            # The free port may have been taken meanwhile by another process; the first
            # start may pick a new one (a restart later must keep it: the page reconnects).
            if attempt == 2:
                raise
            running.port = free_port()
            running.url = f"http://127.0.0.1:{running.port}"
    return running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = started(Server(tmp_path))
    yield running
    running.stop()


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # Playwright's sync API keeps an asyncio loop in this thread; Django's async-safety
    # guard would then refuse the test's own ORM calls, which are plain blocking code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        # With Playwright's loop running, Django keys connections by async context, so
        # the test's ORM calls opened a connection of their own: close it here.
        connections.close_all()
        chromium.close()


def big_workflow(workflow_id: str) -> None:
    """999 nodes: a root, then 37 stages of 26 parallel tasks joined by a barrier; in queues
    of its own, so the test's other workers never run it."""
    node = replace(tasks.noop.envelope(), queue="big")
    wf = Workflow(workflow_id).coordinator_queue("big").add("extract", node, [])
    barrier = "extract"
    for stage in range(37):
        names = [f"s{stage:02d}-task{i:02d}" for i in range(26)]
        for name in names:
            wf.add(name, node, [barrier])
        if stage < 36:
            barrier = f"s{stage:02d}-join"
            wf.add(barrier, node, names)
    enqueue(wf.prepare())


def wait_db(predicate: Callable[[], bool], timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError("the database never showed the change")


def job_state(job_id: str) -> str | None:
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


@pytest.mark.django_db(transaction=True)
def test_live_workflow_in_chromium(
    server: Server, browser: Any, start_worker: Callable[..., Any], viewer: Any, tmp_path: Path
) -> None:
    batch = (
        Workflow("browser-wf")
        .add("extract", tasks.echo.envelope(value=1), [])
        .add("load", tasks.echo.envelope(value=2), ["extract"])
        .prepare()
    )
    big_workflow("big-wf")
    testing.run_jobs(queues=["big"], include_scheduled=True, max_jobs=120)  # varied colours
    enqueue(batch)
    testing.run_one(queues=["headgate-workflow"])  # the first tick: extract is available
    assert job_state("browser-wf:extract") == "available"

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server.url}/admin/")
    assert page.locator("#headgate-console-module").is_visible()

    page.goto(f"{server.url}/admin/headgate_django/job/queues/")
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)

    page.goto(f"{server.url}/admin/headgate_django/job/workflows/browser-wf/graph/")
    page.wait_for_selector("#hg-workflow[data-ready='1']")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    page.evaluate("window.__sameDocument = true")
    extract = '[data-node="extract"]'
    assert page.get_attribute(extract, "data-state") == "available"
    assert "hg-wait" in page.get_attribute('[data-from="extract"][data-to="load"]', "class")

    # Keyboard: Tab reaches a node; Enter opens its detail.
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("!!document.activeElement.getAttribute('data-node')"):
            break
    focused = page.evaluate("document.activeElement.getAttribute('data-node')")
    assert focused in ("extract", "load")
    page.keyboard.press("Enter")
    assert page.locator("#hg-panel h2").inner_text() == focused
    assert "0 failed · 0 crashed · at most " in page.locator("#hg-panel").inner_text()

    start_worker("--burst", "--queue", "default")  # runs extract only: coordinators wait
    committed = wait_db(lambda: job_state("browser-wf:extract") == "completed")
    page.wait_for_selector(f'{extract}[data-state="completed"]', timeout=LIVE_WITHIN * 1000)
    shown = time.monotonic()
    assert shown - committed < LIVE_WITHIN
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    assert "hg-done" in page.get_attribute('[data-from="extract"][data-to="load"]', "class")
    assert "completed" in page.get_attribute(extract, "aria-label")

    # Restart the server: the page notices, reconnects by itself and follows again.
    server.stop()
    page.wait_for_selector("#hg-live[data-status='reconnecting']", timeout=10_000)
    server.start()
    page.wait_for_selector("#hg-live[data-status='live']", timeout=15_000)
    start_worker("--burst", "--queue", "default", "--queue", "headgate-workflow")
    page.wait_for_selector('[data-node="load"][data-state="completed"]', timeout=60_000)
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    page.screenshot(path=str(tmp_path / "workflow.png"), full_page=True)

    page.goto(f"{server.url}/admin/headgate_django/job/workflows/big-wf/graph/")
    page.wait_for_selector("#hg-workflow[data-ready='1']", timeout=30_000)
    timing = page.evaluate("window.hgTiming")
    nav = page.evaluate(
        "(() => { const n = performance.getEntriesByType('navigation')[0];"
        " return {server_ms: n.responseStart - n.requestStart, bytes: n.transferSize}; })()"
    )
    assert timing["nodes"] == 999
    drawn = page.evaluate("window.hgPage.snap.drawn.length")
    assert page.locator("[data-node], [data-group]").count() == drawn < 999  # fan-outs grouped
    page.screenshot(path=str(tmp_path / "workflow-999.png"))
    figures = {**timing, **nav}
    (tmp_path / "console-timings.json").write_text(json.dumps(figures, indent=2))
    print(f"999-node workflow page: {json.dumps(figures)}")
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_the_api_docs_render_with_the_network_cut_off(
    server: Server, browser: Any, viewer: Any, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    outside: list[str] = []

    def only_this_server(route: Any) -> None:
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    page.goto(f"{server.url}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server.url}/admin/")

    page.goto(f"{server.url}/api/v1/docs/")
    page.wait_for_selector(".swagger-ui .info .title", timeout=20_000)
    assert "headgate" in page.locator(".swagger-ui .info .title").inner_text().lower()
    assert page.locator(".opblock").count() > 20  # the operations, from the schema
    page.screenshot(path=str(tmp_path / "api-docs.png"))
    assert outside == []

    page.goto(f"{server.url}/api/v1/redoc/")
    page.wait_for_selector(".menu-content", timeout=20_000)
    assert page.locator(".menu-content li").count() > 20
    # ReDoc's bundle asks for its own "powered by" logo; the page renders without it.
    assert [url for url in outside if "redoc.ly/redoc/logo" not in url] == []


@pytest.mark.django_db(transaction=True)
def test_schedule_list_in_chromium(
    server: Server, browser: Any, viewer: Any, tmp_path: Path
) -> None:
    """The schedule list: spec in words, five fire times in the viewer's zone and UTC, the
    newest events' outcomes; a pause and a tick made elsewhere show without a reload."""
    from headgate_django import schedules
    from headgate_django.models import Schedule
    from headgate_django.schedules.scheduler import run_pass
    from headgate_django.store import db_now

    schedules.upsert("b-nightly", "CRON_TZ=Europe/Berlin 30 2 * * *", tasks.noop.envelope())
    schedules.upsert("b-every", "@every 90m", tasks.noop.envelope())
    schedules.upsert("b-parked", "@hourly", tasks.noop.envelope())
    Schedule.objects.filter(name="b-parked").update(spec="0 * * * *", timezone="Mars/Olympus")
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server.url}/admin/")
    page.click("#headgate-console-module >> text=Schedules")
    page.wait_for_selector("#hg-schedules[data-ready='1']")
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    page.evaluate("window.__sameDocument = true")
    nightly = page.locator('[data-schedule="b-nightly"]')
    assert "At 02:30 (Europe/Berlin)" in nightly.inner_text()
    assert nightly.locator(".hg-next li").count() == 5
    assert "UTC" in nightly.locator(".hg-next li").first.inner_text()
    every = page.locator('[data-schedule="b-every"]')
    assert "Every 1 hour 30 minutes" in every.inner_text() and "none yet" in every.inner_text()
    parked = page.locator('[data-schedule="b-parked"]')
    assert parked.locator('[data-flag="parked"]').inner_text() == "parked"
    assert "cannot be planned: unknown time zone 'Mars/Olympus'" in parked.inner_text()

    schedules.pause("b-nightly")
    page.wait_for_selector('[data-schedule="b-nightly"][data-paused="1"]', timeout=5_000)
    assert nightly.locator('[data-flag="paused"]').inner_text() == "paused"
    Schedule.objects.filter(name="b-every").update(next_run_at=db_now())
    run_pass()
    page.wait_for_selector('[data-schedule="b-every"] [data-outcome="enqueued"]', timeout=5_000)
    assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
    page.screenshot(path=str(tmp_path / "schedules.png"), full_page=True)
    assert errors == []

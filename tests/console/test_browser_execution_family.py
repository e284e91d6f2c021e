"""The durable execution page in headless Chromium: a parent links its children, and a
child links its parent, and the links open those executions' pages."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import durable, testing
from tests.console.test_browser import (  # noqa: F401  (fixtures)
    Server,
    browser,
    server,
)
from tests.console.test_browser_lists import login

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_parent_and_children_link_each_other(
    server: Server,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    viewer: Any,
) -> None:
    wf = durable.Client().start("console-parent", "1", 3, workflow_id="order:3").workflow_id
    testing.run_jobs()
    page = browser.new_page()
    login(page, server)
    page.goto(f"{server.url}/admin/headgate_django/execution/{wf}/timeline/")
    child = page.locator("#hg-family ul.hg-children li a")
    child.wait_for()
    assert child.inner_text() == "order:3:child:1"
    assert "console-ship@1" in page.locator("#hg-family li").inner_text()
    child.click()
    page.wait_for_url("**/order%3A3%3Achild%3A1/timeline/")
    parent = page.locator("#hg-family p.hg-parent a")
    assert parent.inner_text() == wf
    parent.click()
    page.wait_for_url("**/order%3A3/timeline/")
    assert page.locator("#hg-family ul.hg-children li").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_live_snapshot_keeps_the_family_links_the_page_shows(
    server: Server,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    viewer: Any,
) -> None:
    """The socket's first snapshot re-renders the page as it opens: a family link replaced
    by its own copy between a press and its release loses the click (seen as a click that
    went nowhere)."""
    wf = durable.Client().start("console-parent", "1", 3, workflow_id="order:4").workflow_id
    testing.run_jobs()
    page = browser.new_page()
    # The page draws its embedded snapshot, then opens the socket: what it shows as the
    # socket is made is what the first live snapshot must keep (taken any later, a snapshot
    # may already have come and gone, and the test would wait for one that never comes).
    page.add_init_script(
        """(() => {
            const Native = window.WebSocket;
            window.WebSocket = function (...args) {
                if (!window.hgRow) {
                    window.hgLink = document.querySelector("#hg-family ul.hg-children li a");
                    window.hgRow = document.querySelector("#hg-history-body tr");
                }
                return new Native(...args);
            };
            window.WebSocket.prototype = Native.prototype;
            Object.assign(window.WebSocket, Native);
        })()"""
    )
    login(page, server)
    page.goto(f"{server.url}/admin/headgate_django/execution/{wf}/timeline/")
    page.wait_for_function("() => window.hgLink instanceof Element")
    # The history is rebuilt on every snapshot: its first row gone means one arrived.
    page.wait_for_function("() => !window.hgRow.isConnected")
    assert page.evaluate("() => window.hgLink.isConnected")

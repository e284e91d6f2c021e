"""Large workflow graphs in headless Chromium: a 999-node workflow is drawn grouped and
answers clicks, fan-outs are group nodes that expand and collapse, labels are readable at
the first zoom. A 300-node graph's screenshot goes to ``docs/img/``.

How fast the page draws is measured by ``benchmarks/console.py`` (medians of repeated
loads), not asserted here: one load on a busy machine says nothing about the page."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from headgate_django import enqueue, testing
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.console.test_browser import (  # noqa: F401  (fixtures)
    Server,
    big_workflow,
    browser,
    server,
)
from tests.console.test_browser_lists import DOCS_IMG, LAPTOP, login

pytestmark = [pytest.mark.browser, pytest.mark.slow]
#: On-screen height of a node name at the first zoom, at least (13 px at 100 %).
READABLE_PX = 10


def staged_workflow(workflow_id: str, stages: int, width: int) -> None:
    """A root, then ``stages`` fan-outs of ``width`` alike tasks, each joined by a barrier."""
    node = replace(tasks.noop.envelope(), queue="big")
    wf = Workflow(workflow_id).coordinator_queue("big").add("extract", node, [])
    barrier = "extract"
    for stage in range(stages):
        names = [f"s{stage:02d}-task{i:02d}" for i in range(width)]
        for name in names:
            wf.add(name, node, [barrier])
        barrier = f"s{stage:02d}-join"
        wf.add(barrier, node, names)
    enqueue(wf.prepare())


def open_graph(page: Any, server: Server, workflow_id: str) -> dict[str, Any]:  # noqa: F811
    page.goto(f"{server.url}/admin/headgate_django/job/workflows/{workflow_id}/graph/")
    page.wait_for_selector("#hg-workflow[data-ready='1']", timeout=30_000)
    return page.evaluate("window.hgTiming")


@pytest.mark.django_db(transaction=True)
def test_a_999_node_graph_is_grouped_readable_and_interactive(
    server: Server,  # noqa: F811  (the fixture imported above)
    browser: Any,  # noqa: F811
    viewer: Any,
) -> None:
    big_workflow("big-wf")
    staged_workflow("wf-300", stages=11, width=26)  # 298 nodes
    testing.run_jobs(queues=["big"], include_scheduled=True, max_jobs=150)  # varied states
    page = browser.new_page(viewport=LAPTOP)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    login(page, server)
    # The 300-node graph, as the docs show it.
    open_graph(page, server, "wf-300")
    assert page.locator("[data-group]").count() == 11
    page.screenshot(path=str(DOCS_IMG / "workflow-300.png"))

    timing = open_graph(page, server, "big-wf")
    assert timing["nodes"] == 999
    groups = page.locator("[data-group]")
    assert groups.count() == 37  # one per stage of 26 alike tasks
    assert page.locator("[data-node]").count() == 999 - 37 * 26
    # Interactive: a click on a node opens its panel at once.
    page.click('[data-node="extract"]')
    assert page.locator("#hg-panel h2").inner_text() == "extract"
    figures = {**timing, "nodes_drawn": page.evaluate("window.hgPage.snap.drawn.length")}
    print(f"999-node graph: {json.dumps(figures)}")
    # Labels readable at the first zoom.
    height = page.evaluate(
        "document.querySelector('[data-node=\"extract\"] .hg-name').getBoundingClientRect().height"
    )
    assert height >= READABLE_PX, height

    # A group says what it holds, expands on click and collapses from a member's panel.
    first = groups.first
    gid = first.get_attribute("data-group")
    counts = json.loads(first.get_attribute("data-counts"))
    assert sum(counts.values()) == 26
    assert "26 ×" in (first.text_content() or "")
    # Expanding is timed on the socket's path: with the socket not open yet, the page
    # falls back to loading the expanded graph anew, which sets no timing.
    page.wait_for_selector("#hg-live[data-status='live']", timeout=10_000)
    first.click()
    page.wait_for_selector("#hg-workflow[data-ready='1']", timeout=10_000)
    assert page.locator("[data-group]").count() == 36
    assert page.locator("[data-node]").count() == 999 - 36 * 26
    expand_ms = page.evaluate("window.hgGroupMs")
    print(f"999-node graph: expanding a group took {expand_ms:.0f} ms")
    member = gid.split(":", 1)[1]
    page.click(f'[data-node="{member}"]')
    page.click("[data-collapse]")
    page.wait_for_selector("#hg-workflow[data-ready='1']", timeout=10_000)
    page.wait_for_function("document.querySelectorAll('[data-group]').length === 37")
    assert "expand=" not in page.url

    assert errors == []

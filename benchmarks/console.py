#!/usr/bin/env python
"""How fast the console draws a 999-node workflow, server side and in headless Chromium.

    .venv/bin/python benchmarks/console.py [--repeat 7] [--json OUT]

Builds a fresh SQLite database in a temp directory for the sample project, enqueues a
999-node workflow (a root, then 37 stages of 26 parallel tasks joined by barriers) and
measures, each as a median over ``--repeat`` runs:

1. server: the page's snapshot (graph, states, job detail, timeline) with a cold layout
   cache (igraph's Sugiyama layout computed) and a warm one, and the live consumer's
   change fingerprint (what it polls every 0.5 s on the in-memory channel layer);
   both as the page opens (fan-outs drawn as group nodes) and with every group expanded
   (every node drawn, as before groups), with the count of drawn items and edges;
2. browser: the sample project served by Daphne, the page loaded in Debian's headless
   Chromium; from the embedded data parsed to the DOM built, and to the next painted
   frame (``window.hgTiming``), grouped and all expanded; and a click on a group until
   the graph with it expanded is drawn (``window.hgGroupMs``, over the socket).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WORKFLOW = "bench-999"


def build(repeat: int) -> dict[str, Any]:
    """In a child with Django set up: data, then the server-side timings."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from headgate_django import enqueue
    from headgate_django.console import layout
    from headgate_django.console.snapshots import workflow_snapshot
    from headgate_django.store.console import workflow_fingerprint
    from headgate_django.workflows import Workflow
    from sampleproject.demo.tasks import send_welcome_email

    call_command("migrate", verbosity=0)
    User.objects.create_superuser("bench", "bench@example.com", "bench")
    wf = Workflow(WORKFLOW).add("extract", send_welcome_email.envelope(user_id=0), [])
    barrier = "extract"
    for stage in range(37):
        names = [f"s{stage:02d}-task{i:02d}" for i in range(26)]
        for name in names:
            wf.add(name, send_welcome_email.envelope(user_id=1), [barrier])
        if stage < 36:
            barrier = f"s{stage:02d}-join"
            wf.add(barrier, send_welcome_email.envelope(user_id=2), names)
    enqueue(wf.prepare())

    shape: dict[str, Any] = {}

    def snapshot(expanded: list[str], label: str) -> float:
        start = time.perf_counter()
        snap = workflow_snapshot(
            WORKFLOW, reveal=True, job_url=lambda job_id: job_id, expanded=expanded
        )
        shape[f"{label}_drawn"] = [len(snap["drawn"])]
        shape[f"{label}_edges"] = [len(snap["layout"]["edges"])]
        return (time.perf_counter() - start) * 1000

    first = workflow_snapshot(WORKFLOW, reveal=True, job_url=lambda job_id: job_id)
    every = [g["id"] for g in first["groups"]]
    figures: dict[str, list[float]] = {}
    for label, expanded in (("grouped", []), ("expanded", every)):
        cold, warm = [], []
        for _ in range(repeat):
            layout._cache.clear()
            cold.append(snapshot(expanded, label))
            warm.append(snapshot(expanded, label))
        figures[f"{label}_snapshot_cold_ms"] = cold
        figures[f"{label}_snapshot_warm_ms"] = warm
    fingerprint = []
    for _ in range(repeat):
        start = time.perf_counter()
        workflow_fingerprint(WORKFLOW)
        fingerprint.append((time.perf_counter() - start) * 1000)
    return {**figures, "fingerprint_ms": fingerprint, **shape, "groups": every}


def browse(env: dict[str, str], repeat: int, groups: list[str]) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/admin/login/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        results: dict[str, list[float]] = {}
        everything = "".join(f"&expand={urllib.parse.quote(g)}" for g in groups)
        pages = {"grouped": "?", "expanded": "?" + everything[1:]}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{url}/admin/login/")
            page.fill("#id_username", "bench")
            page.fill("#id_password", "bench")
            page.click("input[type=submit]")
            page.wait_for_url(f"{url}/admin/")
            graph = f"{url}/admin/headgate_django/job/workflows/{WORKFLOW}/graph/"
            for label, query in pages.items():
                for _ in range(repeat + 1):  # the first load warms the server's layout cache
                    page.goto(graph + query)
                    page.wait_for_selector("#hg-workflow[data-ready='1']", timeout=60_000)
                    timing = page.evaluate("window.hgTiming")
                    nav = page.evaluate(
                        "performance.getEntriesByType('navigation')[0].responseStart"
                        " - performance.getEntriesByType('navigation')[0].requestStart"
                    )
                    for key in ("build_ms", "painted_ms", "since_response_ms"):
                        results.setdefault(f"{label}_{key}", []).append(timing[key])
                    results.setdefault(f"{label}_server_ms", []).append(nav)
            for _ in range(repeat + 1):
                page.goto(graph)
                page.wait_for_selector("#hg-workflow[data-ready='1']", timeout=60_000)
                page.wait_for_selector("#hg-live[data-status='live']", timeout=30_000)
                page.locator("[data-group]").first.click()
                page.wait_for_function("window.hgGroupMs !== undefined", timeout=60_000)
                results.setdefault("group_expand_ms", []).append(page.evaluate("window.hgGroupMs"))
            browser.close()
        return {key: values[1:] for key, values in results.items()}
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(build(args.repeat)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "sampleproject.settings",
            "DATABASE_URL": f"sqlite:///{tmp}/console.sqlite3",
            "PYTHONPATH": str(ROOT),
            "DJANGO_DEBUG": "1",
        }
        child = [sys.executable, __file__, "--child", "--repeat", str(args.repeat)]
        server_side = json.loads(subprocess.check_output(child, env=env, cwd=ROOT))
        groups = server_side.pop("groups")
        browser_side = browse(env, args.repeat, groups)
    figures = {**server_side, **browser_side}
    print(f"999-node workflow page, median of {args.repeat} (min–max), ms")
    for key, values in figures.items():
        print(
            f"  {key:30} {statistics.median(values):8.1f}   ({min(values):.1f}–{max(values):.1f})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

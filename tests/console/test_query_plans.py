"""No console page or API list reads every row of a large job table.

On PostgreSQL, with a few hundred thousand finished and scheduled jobs filled in SQL and
fresh statistics, every query each page and list issues is explained: none may scan
``headgate_job`` sequentially or sort more rows than a page's worth of counting. A page
added later without an index for its query fails here. SQLite and MariaDB are skipped
(MariaDB's plans are measured by ``benchmarks/large_tables.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.fill import analyze, fill
from headgate_django import store
from tests.conformance.helpers import enqueue_job

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="plans are checked on PostgreSQL"),
]

TERMINAL, SCHEDULED = 300_000, 30_000
#: A sort of more rows than this is a sort of the table, not of a page or a capped count.
MAX_SORTED = 20_000


def _admin(name: str, **query: str) -> str:
    url = reverse(f"admin:headgate_django_{name}")
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


PAGES = [
    _admin("job_changelist"),
    _admin("job_changelist", state__exact="archived"),
    _admin("job_changelist", state__exact="completed"),
    _admin("job_changelist", state__exact="scheduled"),
    _admin("job_changelist", queue__exact="q1"),
    _admin("job_changelist", kind__exact="bench.k3"),
    _admin("job_changelist", q="bench.k1"),
    _admin("queues"),
    _admin("workflows"),
    _admin("workflows", state="running"),
    *(
        _admin(f"{model}_changelist")
        for model in (
            "quarantine",
            "dutylease",
            "queuestate",
            "workflowcheckpoint",
            "signalemission",
            "graft",
            "execution",
            "historyevent",
            "signalinbox",
            "idempotencyrecord",
        )
    ),
    "/api/v1/jobs",
    "/api/v1/jobs?state=archived&limit=50",
    "/api/v1/jobs?state=scheduled&state=cancelled",
    "/api/v1/jobs?state=completed",
    "/api/v1/jobs?queue=q2",
    "/api/v1/jobs?kind=bench.k4",
    "/api/v1/jobs?workflow_id=wf-1",
    "/api/v1/jobs?q=bench.k5",
    "/api/v1/jobs/counts",
    "/api/v1/jobs/counts?queue=q3",
    "/api/v1/queues",
    "/api/v1/quarantine",
    "/api/v1/workflows",
    "/api/v1/workflows/wf-1/signals",
    "/api/v1/durable/executions",
]


@pytest.fixture
def large_table(django_db_blocker: Any) -> Iterator[None]:
    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=TERMINAL, scheduled=SCHEDULED)
    for _ in range(3):
        enqueue_job(queue="q1")
    store.job_claim(worker_id="plans", limit=1, lease_ttl=store_lease(), queues=["q1"])
    with connection.cursor() as cursor:
        analyze(cursor, "postgresql")
    yield


def store_lease() -> Any:
    from datetime import timedelta

    return timedelta(minutes=5)


def _nodes(plan: dict[str, Any], bounded: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every node with whether a ``Limit`` above it stops it early (no sort or aggregate
    in between, which would read their whole input first)."""
    yield plan, bounded
    kind = plan["Node Type"]
    below = kind == "Limit" or (bounded and kind not in ("Sort", "Aggregate", "Hash"))
    for child in plan.get("Plans", []):
        yield from _nodes(child, below)


def _reads_job_table(plan: dict[str, Any]) -> bool:
    return any(n.get("Relation Name") == "headgate_job" for n, _ in _nodes(plan))


def problems(sql: str) -> list[str]:
    """What is wrong with the plan of ``sql``: unbounded scans and large sorts of jobs. A
    sequential scan under a ``Limit`` stops at the limit's rows (a capped count of a
    state most rows are in) and is allowed."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    found = []
    for node, bounded in _nodes(plan):
        on_jobs = node.get("Relation Name") == "headgate_job"
        if node["Node Type"] == "Seq Scan" and on_jobs and not bounded:
            found.append("Seq Scan on headgate_job")
        sort = node["Node Type"] in ("Sort", "Incremental Sort")
        if sort and node["Plan Rows"] > MAX_SORTED and _reads_job_table(node):
            found.append(f"sort of {node['Plan Rows']} jobs")
    return found


def test_every_page_and_list_reads_jobs_through_an_index(
    large_table: None, superuser: Any, unprepared: None
) -> None:
    client = Client()
    client.force_login(superuser)
    bad: dict[str, list[str]] = {}
    for url in PAGES:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code in (200, 404), (url, response.status_code)
        for query in captured.captured_queries:
            sql = query["sql"] or ""
            if "headgate_job" in sql and sql.lstrip().upper().startswith("SELECT"):
                for problem in problems(sql):
                    bad.setdefault(url, []).append(f"{problem}: {sql[:300]}")
    assert not bad, json.dumps(bad, indent=2)

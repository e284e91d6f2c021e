"""No console page or API list reads every row of a large job table.

On PostgreSQL, with a few hundred thousand finished and scheduled jobs filled in SQL and
fresh statistics, every query each page and list issues is explained and run
(``EXPLAIN ANALYZE``): none may scan ``headgate_job`` sequentially, sort more rows than a
page's worth of counting, or read more rows than that through any path (an index walked
in order while a filter drops nearly every row reads the table as surely as a scan: a
list of a rare kind without an index on kind did). A page added later without an index
for its query fails here. SQLite and MariaDB are skipped
(MariaDB's plans are measured by ``benchmarks/large_tables.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.fill import analyze, fill
from headgate_django import store
from headgate_django.console.readonly import COUNT_CAP
from headgate_django.store.console import job_page_fingerprint
from headgate_django.store.windows import WINDOW
from headgate_django.store.workers import Beat, queue_minutes_add, worker_heartbeat
from tests.conformance.helpers import enqueue_job

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="plans are checked on PostgreSQL"),
]

TERMINAL, SCHEDULED = 300_000, 30_000
#: A sort of more rows than this is a sort of the table, not of a page or a capped count.
MAX_SORTED = 20_000
#: Nor may any one step read more rows than this, kept or filtered out...
MAX_READ = 20_000
#: ...except the admin pager's capped count (``LIMIT COUNT_CAP + 1``): scanning for it in
#: table order is the better plan while at least 1 row in this many matches, so it may
#: read up to this many times its cap; a rarer filter must come through an index.
CAPPED_COUNT_SCAN = 20
#: Finished jobs kept, and jobs due for a duty, for the duties' plans.
DUTY_RETAINED, DUTY_DUE = 100_000, 50_000
#: A kind few jobs have: its lists must not walk the table to find them.
RARE_KIND = "bench.rare"
#: A queue few jobs are in: no index leads with the queue, so its lists read a window.
RARE_QUEUE = "rare-q"


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
    _admin("job_changelist", kind__exact=RARE_KIND),
    _admin("job_changelist", q=RARE_KIND),
    _admin("queues"),
    _admin("overview"),
    _admin("workers"),
    # the lists the overview's numbers open
    _admin("job_changelist", queue__exact="q1", state__exact="completed"),
    _admin("job_changelist", queue__exact="q1", state__exact="retryable"),
    _admin("job_changelist", queue__exact="q1", state__exact="running", claimed_by__exact="plans"),
    _admin("job_changelist", queue__exact=RARE_QUEUE),
    _admin("job_changelist", queue=RARE_QUEUE),
    _admin("job_changelist", queue__exact=RARE_QUEUE, state__exact="completed"),
    _admin("job_changelist", queue__exact=RARE_QUEUE, state__exact="archived"),
    _admin("job_changelist", claimed_by__exact="plans"),
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
    f"/api/v1/jobs?kind={RARE_KIND}",
    f"/api/v1/jobs?q={RARE_KIND}",
    f"/api/v1/jobs?kind={RARE_KIND}&state=completed",
    "/api/v1/jobs/counts",
    "/api/v1/jobs/counts?queue=q3",
    "/api/v1/queues",
    "/api/v1/quarantine",
    "/api/v1/workflows",
    "/api/v1/workflows/wf-1/signals",
    "/api/v1/durable/executions",
    "/api/v1/workers",
]


LIVE_LIST_FILTERS: list[dict[str, str]] = [
    {},
    {"state": "archived"},
    {"state": "scheduled"},
    {"queue": "q1"},
    {"queue": RARE_QUEUE},
    {"queue": RARE_QUEUE, "state": "completed"},
    {"kind": RARE_KIND},
    {"search": RARE_KIND},
    {"search": "bench.k1"},
]


@pytest.fixture
def large_table(django_db_blocker: Any) -> Iterator[None]:
    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=TERMINAL, scheduled=SCHEDULED)
    for _ in range(3):
        enqueue_job(queue="q1")
        enqueue_job(kind=RARE_KIND)
    # Older than every filled job (ids sort before them): beyond the newest jobs' window.
    for n in range(3):
        enqueue_job(queue=RARE_QUEUE, id=f"0000-rare-{n}")
    store.job_claim(worker_id="plans", limit=1, lease_ttl=store_lease(), queues=["q1"])
    worker_heartbeat(
        Beat(
            "plans", "host", 1, ["q1"], 1, store_lease(), in_flight=1, in_flight_by_queue={"q1": 1}
        )
    )
    queue_minutes_add({"q1": (3, 1, 1)})
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


def _rows_read(node: dict[str, Any]) -> int:
    """Rows a step produced or threw away, over all its loops."""
    dropped = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return int((node.get("Actual Rows", 0) + dropped) * node.get("Actual Loops", 1))


def _read_limit(sql: str) -> int:
    """A list no index serves reads a window of the newest jobs (a range of the primary
    key from the edge found first, ``store.windows``): up to that many rows."""
    if '"headgate_job"."id" >= ' in sql or f"LIMIT 1 OFFSET {WINDOW - 1}" in sql:
        return WINDOW
    capped = f"LIMIT {COUNT_CAP + 1}" in sql and "COUNT(*)" in sql
    return (COUNT_CAP + 1) * CAPPED_COUNT_SCAN if capped else MAX_READ


def _explained(sql: str) -> dict[str, Any]:
    """The plan PostgreSQL ran ``sql`` with (``EXPLAIN ANALYZE``), as JSON."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        raw = cursor.fetchone()[0]
    plan: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return plan


def problems(sql: str) -> list[str]:
    """What is wrong with the plan of ``sql``: unbounded scans, large sorts and large reads
    of jobs. A sequential scan under a ``Limit`` stops at the limit's rows (a capped count
    of a state most rows are in) and is allowed."""
    plan = _explained(sql)
    found = []
    for node, bounded in _nodes(plan):
        on_jobs = node.get("Relation Name") == "headgate_job"
        if node["Node Type"] == "Seq Scan" and on_jobs and not bounded:
            found.append("Seq Scan on headgate_job")
        sort = node["Node Type"] in ("Sort", "Incremental Sort")
        if sort and node["Plan Rows"] > MAX_SORTED and _reads_job_table(node):
            found.append(f"sort of {node['Plan Rows']} jobs")
        if on_jobs and _rows_read(node) > _read_limit(sql):
            found.append(f"{node['Node Type']} reading {_rows_read(node)} jobs")
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
    # The job list's live first page polls this every second per open tab.
    for filters in LIVE_LIST_FILTERS:
        with CaptureQueriesContext(connection) as captured:
            job_page_fingerprint(**filters)
        for query in captured.captured_queries:
            for problem in problems(query["sql"] or ""):
                bad.setdefault(f"live list {filters}", []).append(problem)
    assert not bad, json.dumps(bad, indent=2)


#: Tables of the worker registry and the per-minute counters, filled far past their
#: real size (a day of minutes for 200 queues; thousands of workers).
MINUTE_ROWS_QUEUES, WORKER_ROWS = 200, 5_000
SMALL_TABLES = ("headgate_queue_minute", "headgate_worker")
#: The most rows one step may read from them: an hour of minutes per queue, a page of
#: the registry (store.workers.MAX_WORKERS).
MAX_SMALL_READ = 60 * MINUTE_ROWS_QUEUES + 1_001


def small_table_problems(sql: str, params: Any = None) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    found = []
    for node, _ in _nodes(plan):
        table = node.get("Relation Name")
        if table not in SMALL_TABLES:
            continue
        if node["Node Type"] == "Seq Scan":
            found.append(f"Seq Scan on {table}")
        if _rows_read(node) > MAX_SMALL_READ:
            found.append(f"{node['Node Type']} reading {_rows_read(node)} rows of {table}")
    return found


def test_the_registry_and_the_minute_counts_are_read_through_their_indexes(
    superuser: Any, unprepared: None
) -> None:
    from headgate_django.store.workers import MINUTES_KEPT, worker_prune

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO headgate_queue_minute (queue, minute, completed, failed, retried) "
            "SELECT 'q' || q, FLOOR(EXTRACT(EPOCH FROM now()) / 60)::bigint - m, 1, 0, 0 "
            "FROM generate_series(0, %s) AS q, generate_series(0, %s) AS m",
            [MINUTE_ROWS_QUEUES - 1, MINUTES_KEPT + 60],
        )
        cursor.execute(
            "INSERT INTO headgate_worker (id, host, pid, queues, concurrency, in_flight, "
            "in_flight_by_queue, claimed, completed, retried, failed, heartbeat_ms, started_at, "
            "last_heartbeat_at, stopped_at) SELECT 'w-' || lpad(n::text, 6, '0'), 'h', n, NULL, "
            "1, 0, '{}', 0, 0, 0, 0, 5000, now(), now() - n * interval '1 second', NULL "
            "FROM generate_series(1, %s) AS n",
            [WORKER_ROWS],
        )
        cursor.execute("ANALYZE headgate_queue_minute")
        cursor.execute("ANALYZE headgate_worker")
    client = Client()
    client.force_login(superuser)
    bad: dict[str, list[str]] = {}
    urls = [_admin("overview"), _admin("workers"), "/api/v1/workers", "/api/v1/workers/w-000001"]
    for url in urls:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200, url
        for query in captured.captured_queries:
            sql = query["sql"] or ""
            if any(t in sql for t in SMALL_TABLES):
                bad.setdefault(url, []).extend(small_table_problems(sql))
    with CaptureQueriesContext(connection) as captured:
        worker_prune(retention=timedelta(minutes=30))
    for query in captured.captured_queries:
        bad.setdefault("worker_prune", []).extend(small_table_problems(query["sql"]))
    assert not any(bad.values()), json.dumps(bad, indent=2)


def _stale_statistics(cursor: Any, kind: str) -> None:
    """Rows whose statistics say a third of the table is due for ``kind``'s duty."""
    if kind == "evict":
        fill(cursor, "postgresql", terminal=DUTY_RETAINED, expired=DUTY_DUE)
    else:
        fill(cursor, "postgresql", terminal=DUTY_RETAINED, scheduled=DUTY_DUE)
        if kind == "reclaim":
            cursor.execute(
                "UPDATE headgate_job SET state = 'running', lease_id = 'l', claimed_by = 'w', "
                "lease_expires_at = now() - interval '1 minute' WHERE state = 'scheduled'"
            )
        else:
            cursor.execute(
                "UPDATE headgate_job SET scheduled_at = now() - interval '1 minute' "
                "WHERE state = 'scheduled'"
            )
    analyze(cursor, "postgresql")


DUTIES = {
    "evict": lambda: store.job_evict_retained(limit=100),
    "promote": lambda: store.job_promote_due(limit=100),
    "reclaim": lambda: store.job_reclaim_expired(limit=100),
}


@pytest.mark.parametrize("duty", sorted(DUTIES))
def test_the_duties_read_their_rows_through_their_index_whatever_the_statistics_say(
    duty: str, unprepared: None
) -> None:
    """Statistics taken while a third of the table was due for a duty (a backlog expired,
    a retry storm, a host of crashed workers) make a sequential scan look cheap for "any
    N due rows". Once the rows it meets first are gone, every pass reads the table from
    its first page to find the next ones (eviction beside a drain on 5.5M rows, 1M of them
    expired: a third of the heap per batch); only the duty's index finds them at once."""
    with connection.cursor() as cursor:
        _stale_statistics(cursor, duty)
    assert _unindexed_scans(DUTIES[duty]) == {}


def test_promotion_reads_the_due_index_beside_finished_jobs_and_a_future_backlog(
    unprepared: None,
) -> None:
    """The common shape of a busy table: finished jobs, whose ``scheduled_at`` is in the
    past, and waiting ones scheduled ahead. Taken as independent, the state and the time
    made a sequential scan look like it would meet due jobs at once; it read every row
    on each promotion pass (every 0.2 s) and found none. Only the order of the due index
    keeps the plan on it."""
    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=DUTY_RETAINED, scheduled=DUTY_RETAINED // 5)
        # Rows of a busy table lie in no time order: each state change writes the row
        # anew wherever there is room. Rewrite the finished ones so they lie after the
        # waiting ones, and the planner cannot count on reading the table in time order.
        cursor.execute("UPDATE headgate_job SET attempt = attempt + 1 WHERE state <> 'scheduled'")
        analyze(cursor, "postgresql")
    assert _unindexed_scans(DUTIES["promote"]) == {}


def _unindexed_scans(run: Any) -> dict[str, list[str]]:
    """The steps of each job-table statement ``run`` executes that scan or sort the table,
    by statement."""
    with CaptureQueriesContext(connection) as captured:
        run()
    statements = [
        q["sql"]
        for q in captured.captured_queries
        if "FROM headgate_job" in q["sql"] and "LIMIT" in q["sql"]
    ]
    assert statements
    scans = {}
    for sql in statements:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            raw = cursor.fetchone()[0]
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        steps = [
            f"{n['Node Type']} {n.get('Index Name', '')}".strip()
            for n, _ in _nodes(plan)
            if n.get("Relation Name") == "headgate_job" or "Sort" in n["Node Type"]
        ]
        if any(step.startswith(("Seq Scan", "Sort", "Incremental Sort")) for step in steps):
            scans[sql[:300]] = steps
    return scans


def test_effect_pruning_looks_each_record_s_job_up_by_its_key() -> None:
    """The effects duty finds records whose job is gone. Asked as ``NOT IN (SELECT id FROM
    headgate_job)``, PostgreSQL read every job for it, and again for each record once the
    ids outgrew ``work_mem``; each record's job must be probed through the primary key."""
    from headgate_django.models import Effect, Job
    from headgate_django.store.effect_records import effect_sweep

    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=DUTY_RETAINED)
        analyze(cursor, "postgresql")
    kept = list(Job.objects.values_list("id", flat=True)[:50])
    now = Job.objects.values_list("enqueued_at", flat=True).first()
    Effect.objects.bulk_create(
        [Effect(job_id=j, name="x", fence=1, created_at=now) for j in kept]
        + [Effect(job_id=f"gone-{i}", name="x", fence=1, created_at=now) for i in range(50)]
    )
    with CaptureQueriesContext(connection) as captured:
        assert effect_sweep(after=0) == (50, 0)
    reads = [q["sql"] for q in captured.captured_queries if "headgate_job" in q["sql"]]
    assert reads
    assert {sql[:300]: problems(sql) for sql in reads if problems(sql)} == {}
    assert Effect.objects.count() == 50


def test_a_backpressure_count_reads_the_queue_s_unfinished_jobs_through_indexes(
    unprepared: None,
) -> None:
    """Each enqueue into a queue with a backpressure limit counts its unfinished jobs. As
    one ``state IN (…)`` of the five states, the planner expected a sequential scan to meet
    enough of them at once, and read the finished jobs of a busy table instead."""
    from headgate_django import admission

    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=DUTY_RETAINED, scheduled=DUTY_RETAINED // 5)
        cursor.execute("UPDATE headgate_job SET attempt = attempt + 1 WHERE state <> 'scheduled'")
        analyze(cursor, "postgresql")
    admission.set_backpressure("q1", DUTY_RETAINED)
    assert _unindexed_scans(lambda: enqueue_job(queue="q1")) == {}


def test_the_unknown_kinds_report_does_not_read_the_waiting_jobs_of_known_kinds(
    unprepared: None,
) -> None:
    """A worker whose claims come back short (behind a rate limit, say) reports the kinds
    nobody here can run, once a minute. Counting every available job and dropping the
    known kinds read the whole backlog each time; the kinds are walked through the kind
    index instead, and only unknown kinds' jobs are counted."""
    from benchmarks.fill import KINDS

    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=DUTY_RETAINED)
        cursor.execute(
            "UPDATE headgate_job SET state = 'available', expires_at = NULL "
            "WHERE id IN (SELECT id FROM headgate_job ORDER BY id LIMIT %s)",
            [DUTY_RETAINED // 2],
        )
        analyze(cursor, "postgresql")
    enqueue_job(kind=RARE_KIND)
    known = [f"bench.k{i}" for i in range(KINDS)]
    with CaptureQueriesContext(connection) as captured:
        assert store.unknown_kinds_waiting(known) == {RARE_KIND: 1}
    statements = [q["sql"] for q in captured.captured_queries if "headgate_job" in q["sql"]]
    assert len(statements) <= KINDS + 3
    assert {sql[:200]: problems(sql) for sql in statements if problems(sql)} == {}


def test_the_idempotency_purge_reads_expired_records_in_index_order(unprepared: None) -> None:
    """The purge takes a batch of expired records a minute. In the model's order (newest
    first) each batch sorted every expired record; in ``expires_at`` order the index
    gives the batch at once."""
    from headgate_django.store.idempotency import idempotency_purge_expired

    with connection.cursor() as cursor:
        cursor.execute(
            'INSERT INTO headgate_idempotency (key_digest, key, "user", method, path, '
            "body_hash, status_code, response_headers, response_body, created_at, expires_at) "
            "SELECT md5(g::text) || md5((g + 1)::text), 'k' || g, '1', 'POST', '/api/v1/jobs', "
            "md5(g::text), 201, '{}', '\\x00', now() - interval '2 days' + g * interval '1 s', "
            "now() - interval '1 day' + g * interval '1 s' FROM generate_series(1, %s) g",
            [DUTY_DUE],
        )
        cursor.execute("ANALYZE headgate_idempotency")
    with CaptureQueriesContext(connection) as captured:
        assert idempotency_purge_expired() > 0
    [select] = [q["sql"] for q in captured.captured_queries if "LIMIT" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {select}")
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    assert [n["Node Type"] for n, _ in _nodes(plan) if "Sort" in n["Node Type"]] == []


def test_the_durable_vacuum_reads_expired_executions_in_index_order(unprepared: None) -> None:
    """The vacuum duty deletes finished executions past their retention a batch at a time.
    Ordered by ``finished_at`` alone, a backlog of them was read and sorted whole for each
    batch; in the order of the ``(state, finished_at)`` index the batch comes at once."""
    from headgate_django.store.durable import execution_vacuum

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO headgate_durable_execution (id, name, version, state, failure_reason, "
            "suspended_reason, task_queue, meta, last_seq, created_at, updated_at, finished_at, "
            "parent_close_policy, parent_command_id) SELECT 'e' || g, 'wf', 'v1', "
            "(ARRAY['succeeded', 'failed', 'cancelled'])[1 + g %% 3], '', '', 'default', '{}', "
            "1, now() - interval '30 days', now(), now() - interval '20 days' + g * interval "
            "'1 s', 'terminate', '' FROM generate_series(1, %s) g",
            [DUTY_DUE],
        )
        cursor.execute("ANALYZE headgate_durable_execution")
    with CaptureQueriesContext(connection) as captured:
        assert len(execution_vacuum(older_than=timedelta(days=7), limit=100)) == 100
    [select] = [
        q["sql"]
        for q in captured.captured_queries
        if "FROM headgate_durable_execution" in q["sql"] and "LIMIT" in q["sql"]
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {select}")
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    assert [n["Node Type"] for n, _ in _nodes(plan) if "Sort" in n["Node Type"]] == []


_WORKFLOW_RECORDS = {
    "headgate_signal_emission": (
        "INSERT INTO headgate_signal_emission (workflow_id, signal, idempotency_key, payload, "
        "source, content_hash, emitted_at) SELECT 'wf-' || g, 'go', 'k', NULL, '{}', '', "
        "now() - interval '14 days' + g * interval '10 s' FROM generate_series(1, %s) g"
    ),
    "headgate_graft": (
        "INSERT INTO headgate_graft (workflow_id, revision, receipt_job_id, nodes, status, "
        "reason, decided_at) SELECT 'wf-' || g, 2, 'wf-' || g || ':graft:2', '[]', "
        "'accepted', '', now() - interval '14 days' + g * interval '10 s' "
        "FROM generate_series(1, %s) g"
    ),
}


@pytest.mark.parametrize("table", sorted(_WORKFLOW_RECORDS))
def test_the_workflows_prune_reads_records_without_a_checkpoint_in_index_order(
    table: str, unprepared: None
) -> None:
    """Records of workflows that never wrote a checkpoint (cancelled before their first
    tick) are found through their time index, oldest first, each one's checkpoint and
    coordinator probed by key: neither the records nor the jobs are read whole."""
    from headgate_django.store.workflow_records import workflow_records_prune_without_checkpoint

    with connection.cursor() as cursor:
        fill(cursor, "postgresql", terminal=DUTY_RETAINED)
        cursor.execute(_WORKFLOW_RECORDS[table], [DUTY_RETAINED])  # half of them lapsed
        analyze(cursor, "postgresql")
        cursor.execute(f"ANALYZE {table}")
    with CaptureQueriesContext(connection) as captured:
        assert (
            workflow_records_prune_without_checkpoint(older_than=timedelta(days=7), limit=100)
            == 100
        )
    [select] = [q["sql"] for q in captured.captured_queries if f"FROM {table} r" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {select}")
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    steps = [
        f"{n['Node Type']} {n.get('Relation Name', '')} {n.get('Index Name', '')}".strip()
        for n, _ in _nodes(plan)
    ]
    assert not [s for s in steps if s.startswith(("Seq Scan", "Sort", "Incremental Sort"))], steps
    assert max(_rows_read(n) for n, _ in _nodes(plan)) <= 1_000, steps


#: Rows in each of the console's other large tables, for their changelists' sorts.
OTHER_ROWS = 60_000
#: (changelist, its table): every sort its columns offer is explained over a full table.
SORTED_LISTS = {
    "execution": "headgate_durable_execution",
    "historyevent": "headgate_durable_history",
    "signalinbox": "headgate_durable_signal",
    "scheduleevent": "headgate_schedule_event",
    "effect": "headgate_effect",
}


def _fill_other_tables(cursor: Any) -> None:
    cursor.execute(
        "INSERT INTO headgate_durable_execution (id, name, version, state, failure_reason, "
        "suspended_reason, task_queue, meta, parent_command_id, parent_close_policy, last_seq, "
        "created_at, updated_at, run_id, run_number, history_bytes, history_warning) "
        "SELECT 'e-' || lpad(n::text, 7, '0'), 'w' || n %% 50, '1', "
        "(ARRAY['running', 'succeeded', 'failed'])[1 + n %% 3], '', '', 'q' || n %% 7, '{}', "
        "'', '', 2, now() - n * interval '1 second', now(), '', 1, 0, '' "
        "FROM generate_series(1, %s) AS n",
        [OTHER_ROWS],
    )
    for table, columns, values in (
        ("headgate_durable_history", "execution_id, seq, type, payload, at", "'started', '{}'"),
        ("headgate_durable_signal", "workflow_id, seq, name, payload, received_at", "'go', '{}'"),
    ):
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT 'e-' || lpad((1 + n %% 1000)::text, 7, "
            f"'0'), 1 + n / 1000, {values}, now() FROM generate_series(0, %s) AS n",
            [OTHER_ROWS - 1],
        )
    cursor.execute(
        "INSERT INTO headgate_schedule_event (schedule_name, tick_at, outcome, reason, "
        "target_id, recorded_at) SELECT 's' || n %% 100, now(), 'enqueued', '', '', now() "
        "FROM generate_series(1, %s) AS n",
        [OTHER_ROWS],
    )
    cursor.execute(
        "INSERT INTO headgate_effect (job_id, name, fence, created_at) "
        "SELECT 'j' || n, 'x', 1, now() - n * interval '1 second' "
        "FROM generate_series(1, %s) AS n",
        [OTHER_ROWS],
    )
    for table in SORTED_LISTS.values():
        cursor.execute(f"ANALYZE {table}")


def sorted_table_problems(sql: str, table: str) -> list[str]:
    """A sort of more than a page's worth of ``table``, or a scan of it no ``Limit``
    stops: what a changelist's order must not cost on every page load."""
    plan = _explained(sql)
    found = []
    for node, bounded in _nodes(plan):
        sort = node["Node Type"] in ("Sort", "Incremental Sort")
        reads = any(n.get("Relation Name") == table for n, _ in _nodes(node))
        if sort and reads and node["Plan Rows"] > MAX_SORTED:
            found.append(f"{node['Node Type']} of {node['Plan Rows']} rows of {table}")
        scan = node.get("Relation Name") == table and node["Node Type"] == "Seq Scan"
        if scan and not bounded:
            found.append(f"Seq Scan on {table}")
    return found


def test_the_console_lists_sort_only_as_an_index_serves(superuser: Any, unprepared: None) -> None:
    """Every ``?o=`` a changelist of a large table could be given (each column, both
    ways): the sorts it allows read an index in order, the others keep the default order
    (Django sorted by any of them, whatever ``sortable_by`` said)."""
    from django.contrib import admin

    with connection.cursor() as cursor:
        _fill_other_tables(cursor)
    client = Client()
    client.force_login(superuser)
    bad: dict[str, list[str]] = {}
    for name, table in SORTED_LISTS.items():
        model_admin = next(a for m, a in admin.site._registry.items() if m._meta.model_name == name)
        for index in range(len(model_admin.list_display)):
            for order in (str(index), f"-{index}"):
                url = _admin(f"{name}_changelist", o=order)
                with CaptureQueriesContext(connection) as captured:
                    assert client.get(url).status_code == 200, url
                for query in captured.captured_queries:
                    sql = query["sql"] or ""
                    if table in sql and sql.lstrip().upper().startswith("SELECT"):
                        bad.setdefault(url, []).extend(sorted_table_problems(sql, table))
    assert not any(bad.values()), json.dumps({k: v for k, v in bad.items() if v}, indent=2)


def test_the_failed_workflows_are_listed_through_an_index(superuser: Any, unprepared: None) -> None:
    """A few failed workflows among many: the list filtered to them, in workflow-id order,
    read every checkpoint to find them until their flag had an index."""
    table = "headgate_workflow_checkpoint"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (workflow_id, coordinator_job_id, revision, generation, "
            "completed, failed, started, outcome, history, next_sequence, grafts, updated_at) "
            "SELECT 'wf-' || lpad(n::text, 7, '0'), 'c-' || n, 1, 1, '{}', n %% 20000 = 0, "
            "true, 'waiting', '[]', 1, '[]', now() FROM generate_series(1, %s) AS n",
            [OTHER_ROWS],
        )
        cursor.execute(f"ANALYZE {table}")
    client = Client()
    client.force_login(superuser)
    url = _admin("workflowcheckpoint_changelist", failed__exact="1")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert [c.pk for c in response.context["cl"].result_list] == [
        "wf-0020000",
        "wf-0040000",
        "wf-0060000",
    ]
    bad = []
    for query in captured.captured_queries:
        sql = query["sql"] or ""
        if table in sql and sql.lstrip().upper().startswith("SELECT"):
            for node, _ in _nodes(_explained(sql)):
                if node.get("Relation Name") == table and _rows_read(node) > 100:
                    bad.append(f"{node['Node Type']} reading {_rows_read(node)}: {sql[:200]}")
    assert bad == []


#: Rows in each table whose list's search no index serves, and the window its search
#: reads (a small part of a large table, as the real window is of millions of rows).
SEARCHED_ROWS, SEARCHED_WINDOW = 100_000, 10_000
_EXECUTIONS = (
    "INSERT INTO headgate_durable_execution (id, name, version, state, failure_reason, "
    "suspended_reason, task_queue, meta, parent_command_id, parent_close_policy, last_seq, "
    "created_at, updated_at, run_id, run_number, history_bytes, history_warning) "
    "SELECT 'e-' || lpad(n::text, 7, '0'), 'w' || n %% 50, '1', 'succeeded', '', '', 'q', "
    "'{}', '', '', 2, now() - n * interval '1 second', now(), '', 1, 0, '' "
    "FROM generate_series(1, %s) AS n"
)
#: (changelist, its table): the SQL that fills the table with ``SEARCHED_ROWS`` rows
#: (and what they refer to).
SEARCHED_LISTS: dict[str, tuple[str, list[str]]] = {
    "signalemission": ("headgate_signal_emission", [_WORKFLOW_RECORDS["headgate_signal_emission"]]),
    "effect": (
        "headgate_effect",
        [
            "INSERT INTO headgate_effect (job_id, name, fence, created_at) "
            "SELECT 'j' || lpad(n::text, 7, '0'), 'x', 1, now() FROM generate_series(1, %s) n"
        ],
    ),
    "uniquewindow": (
        "headgate_unique_window",
        [
            "INSERT INTO headgate_unique_window (unique_key, job_id, expires_at) "
            "SELECT 'u-' || n, 'j-' || n, now() + n * interval '1 s' FROM generate_series(1, %s) n"
        ],
    ),
    "executionrun": (
        "headgate_durable_run",
        [
            _EXECUTIONS.replace("%s", "1000").replace("%%", "%"),
            "INSERT INTO headgate_durable_run (execution_id, number, run_id, input, events, "
            "history_bytes, started_at, finished_at) SELECT 'e-' || lpad((1 + n %% 1000)::text, "
            "7, '0'), 1 + n / 1000, 'r-' || n, NULL, 1, 0, now(), now() "
            "FROM generate_series(0, %s - 1) n",
        ],
    ),
    "signalinbox": (
        "headgate_durable_signal",
        [
            _EXECUTIONS.replace("%s", "1000").replace("%%", "%"),
            "INSERT INTO headgate_durable_signal (workflow_id, seq, name, message_id, payload, "
            "received_at) SELECT 'e-' || lpad((1 + n %% 1000)::text, 7, '0'), 1 + n / 1000, "
            "'go', 'm-' || n, '{}', now() FROM generate_series(0, %s - 1) n",
        ],
    ),
    "idempotencyrecord": (
        "headgate_idempotency",
        [
            'INSERT INTO headgate_idempotency (key_digest, key, "user", method, path, body_hash, '
            "status_code, response_headers, response_body, created_at, expires_at) SELECT "
            "md5(g::text) || md5((g + 1)::text), 'k' || g, '1', 'POST', '/api/v1/jobs', "
            "md5(g::text), 201, '{}', '\\x00', now(), now() + interval '1 day' "
            "FROM generate_series(1, %s) g"
        ],
    ),
    "execution": ("headgate_durable_execution", [_EXECUTIONS]),
    "quarantine": (
        "headgate_quarantine",
        [
            "INSERT INTO headgate_quarantine (fingerprint, kind, crash_count, quarantined_at, "
            "sample_payload, sample_job_id, reason) SELECT md5(n::text), 'k' || n %% 10, 3, "
            "now() - n * interval '1 s', '', 'j', '' FROM generate_series(1, %s) n"
        ],
    ),
    # 100 events for each of 1,000 finished runs.
    "runhistoryevent": (
        "headgate_durable_run_history",
        [
            _EXECUTIONS.replace("%s", "1000").replace("%%", "%"),
            "INSERT INTO headgate_durable_run (execution_id, number, run_id, input, events, "
            "history_bytes, started_at, finished_at) SELECT 'e-' || lpad(n::text, 7, '0'), "
            "1, 'r-' || n, NULL, 100, 0, now(), now() FROM generate_series(1, 1000) n",
            "INSERT INTO headgate_durable_run_history (run_id, seq, type, payload, at) "
            "SELECT r.id, s, 'started', '{}', now() FROM headgate_durable_run r, "
            "generate_series(1, %s / 1000) s",
        ],
    ),
    # A day of minutes (store.workers.MINUTES_KEPT) for 70 queues.
    "queueminute": (
        "headgate_queue_minute",
        [
            "INSERT INTO headgate_queue_minute (queue, minute, completed, failed, retried) "
            "SELECT 'q' || q, FLOOR(EXTRACT(EPOCH FROM now()) / 60)::bigint - m, 1, 0, 0 "
            "FROM generate_series(0, 69) AS q, generate_series(0, %s / 70) AS m"
        ],
    ),
}


#: Lists searched with case through their indexes (``ReadOnlyAdmin.get_search_results``),
#: as :data:`SEARCHED_LISTS`, with a term that finds rows and how many.
INDEX_SEARCHED_LISTS: dict[str, tuple[str, list[str], str, int]] = {
    "workflowcheckpoint": (
        "headgate_workflow_checkpoint",
        [
            "INSERT INTO headgate_workflow_checkpoint (workflow_id, coordinator_job_id, "
            "revision, generation, completed, failed, started, outcome, history, "
            "next_sequence, grafts, updated_at) SELECT 'wf-' || lpad(n::text, 7, '0'), "
            "'c-' || n, 1, 1, '{}', false, true, 'waiting', '[]', 1, '[]', now() "
            "FROM generate_series(1, %s) AS n"
        ],
        "wf-005000",
        10,
    ),
    # A workflow id's start: wf-5000 and wf-50000 to wf-50009.
    "graft": ("headgate_graft", [_WORKFLOW_RECORDS["headgate_graft"]], "wf-5000", 11),
    # 100 events for each of 1,000 executions.
    "historyevent": (
        "headgate_durable_history",
        [
            _EXECUTIONS.replace("%s", "1000").replace("%%", "%"),
            "INSERT INTO headgate_durable_history (execution_id, seq, type, payload, at) "
            "SELECT 'e-' || lpad((1 + n %% 1000)::text, 7, '0'), 1 + n / 1000, 'started', "
            "'{}', now() FROM generate_series(0, %s - 1) n",
        ],
        "e-0000500",
        100,
    ),
    # Fair queues' partitions that carry credit: 10 queues of 10,000 tenants each.
    "partitiondeficit": (
        "headgate_partition_deficit",
        [
            "INSERT INTO headgate_partition_deficit (queue, partition_key, deficit) "
            "SELECT 'q' || n %% 10, 'p-' || n, 1 FROM generate_series(1, %s) n"
        ],
        "q3",
        10_000,
    ),
    # The newest 100 events (store.schedules) of each of 1,000 schedules.
    "scheduleevent": (
        "headgate_schedule_event",
        [
            "INSERT INTO headgate_schedule_event (schedule_name, tick_at, outcome, reason, "
            "target_id, recorded_at) SELECT 's' || n %% 1000, now(), 'enqueued', '', '', "
            "now() FROM generate_series(1, %s) AS n"
        ],
        "s500",
        100,
    ),
}


def searched_table_problems(sql: str, table: str) -> list[str]:
    """A step that reads more of ``table`` than a window (twice, for the rows that tie
    with its edge), or sorts more than a page's worth of it: what a search for a rare or
    absent term must not cost."""
    found = []
    for node, _ in _nodes(_explained(sql)):
        reads = node.get("Relation Name") == table
        if reads and _rows_read(node) > 2 * SEARCHED_WINDOW:
            found.append(f"{node['Node Type']} reading {_rows_read(node)} rows of {table}")
        sort = node["Node Type"] in ("Sort", "Incremental Sort")
        if sort and node["Plan Rows"] > MAX_SORTED:
            found.append(f"{node['Node Type']} of {node['Plan Rows']} rows")
    return found


def _searched(
    name: str, table: str, fills: Sequence[str], term: str, superuser: Any
) -> tuple[Any, CaptureQueriesContext]:
    """Fill ``table`` with :data:`SEARCHED_ROWS` rows, then search ``name``'s changelist
    for ``term``: the response (a 200) and the queries it ran."""
    with connection.cursor() as cursor:
        for sql in fills:
            cursor.execute(sql, [SEARCHED_ROWS] if "%s" in sql else None)
        cursor.execute(f"ANALYZE {table}")
    client = Client()
    client.force_login(superuser)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(_admin(f"{name}_changelist", q=term))
    assert response.status_code == 200
    return response, captured


@pytest.mark.parametrize("name", sorted(SEARCHED_LISTS))
def test_a_search_no_index_serves_reads_a_window(
    name: str, superuser: Any, unprepared: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """These lists search several columns at once (``OR``), compared without case: no
    index serves that, and a search for a term no row has read the whole table for the
    page and again for the pager's count. They read it in a window instead."""
    from headgate_django.store import windows

    monkeypatch.setattr(windows, "WINDOW", SEARCHED_WINDOW)
    table, fills = SEARCHED_LISTS[name]
    response, captured = _searched(name, table, fills, "absent", superuser)
    assert list(response.context["cl"].result_list) == []
    bad = []
    for query in captured.captured_queries:
        sql = query["sql"] or ""
        if f'FROM "{table}"' in sql and sql.lstrip().upper().startswith("SELECT"):
            bad.extend(f"{p}: {sql}" for p in searched_table_problems(sql, table))
    assert bad == []


@pytest.mark.parametrize("name", sorted(INDEX_SEARCHED_LISTS))
@pytest.mark.parametrize("found", [True, False], ids=["found", "absent"])
def test_a_search_with_case_reads_through_an_index(
    name: str, found: bool, superuser: Any, unprepared: None
) -> None:
    """These lists search ids and names with case, as an index holds them: a search reads
    the rows it finds (the pager's capped count at most), whether the term is common,
    rare or absent. Without case, a search for a term no row has read the whole table."""
    table, fills, term, count = INDEX_SEARCHED_LISTS[name]
    response, captured = _searched(name, table, fills, term if found else "absent", superuser)
    assert response.context["cl"].result_count == (count if found else 0)
    bad = []
    for query in captured.captured_queries:
        sql = query["sql"] or ""
        if f'FROM "{table}"' in sql and sql.lstrip().upper().startswith("SELECT"):
            for node, _ in _nodes(_explained(sql)):
                if node.get("Relation Name") == table and _rows_read(node) > COUNT_CAP + 1:
                    bad.append(f"{node['Node Type']} reading {_rows_read(node)}: {sql}")
                if (
                    node["Node Type"] in ("Sort", "Incremental Sort")
                    and node["Plan Rows"] > MAX_SORTED
                ):
                    bad.append(f"{node['Node Type']} of {node['Plan Rows']} rows: {sql}")
    assert bad == []

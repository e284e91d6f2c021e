"""A run of the ``effects-prune`` duty reads its slice of the effects table, not the table.

The duty it replaced asked for "N records whose job is gone", oldest first: with no such
record left (jobs now take their records with them) every run read every kept record to
find none, each minute (200,000 records: 0.7 s on PostgreSQL, 1-2 s on MariaDB). The sweep
reads the next ``limit`` records by primary key and deletes, within that range, those whose
job is gone. Checked on PostgreSQL and MariaDB with statistics taken after the fill
(SQLite's reads of the job table are checked in ``test_sqlite_plans.py``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from benchmarks.fill import analyze, fill
from headgate_django import store
from headgate_django.models import Effect, Job
from headgate_django.store.effect_records import effect_sweep
from headgate_django.store.fenced import Completion
from tests.conformance.helpers import enqueue_job

pytestmark = [
    # MariaDB commits the transaction at ANALYZE TABLE: the rows are flushed afterwards.
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor == "sqlite", reason="plans of PostgreSQL and MariaDB"),
]

#: Jobs kept with a record each, and records of jobs gone (older, so swept first).
KEPT, GONE = 100_000, 2_000


def _fill() -> None:
    now = store.db_now()
    Effect.objects.bulk_create(
        Effect(job_id=f"gone-{i}", name="charge", fence=1, created_at=now - timedelta(days=9))
        for i in range(GONE)
    )
    with connection.cursor() as cursor:
        fill(cursor, connection.vendor, terminal=KEPT)
        cursor.execute(
            "INSERT INTO headgate_effect (job_id, name, result, fence, created_at) "
            "SELECT id, 'charge', NULL, 1, %s FROM headgate_job",
            [now],
        )
        analyze(cursor, connection.vendor)
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE headgate_effect")
        else:
            cursor.execute("ANALYZE TABLE headgate_effect")
            cursor.fetchall()


def _sweep_explained(after: int) -> tuple[tuple[int, int], list[str], int]:
    """Run one sweep of 1,000 records after ``after``; explain each of its statements on
    the effects table as it runs (``EXPLAIN ANALYZE`` of the select; the delete's plan
    alone, as analysing it would delete), and return the sweep's result, the steps and
    the records the select read."""
    explained: list[tuple[list[str], int]] = []

    def explain(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb in ("SELECT", "DELETE") and "headgate_effect" in sql:
            explained.append(_reads(sql, params, analyze=verb == "SELECT"))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        result = effect_sweep(after=after, limit=1000)
    return result, [s for steps, _ in explained for s in steps], sum(n for _, n in explained)


def _reads(sql: str, params: Any, *, analyze: bool) -> tuple[list[str], int]:
    """The statement's steps on the effects table (and its sorts), and how many records
    they read, as the database ran it (``EXPLAIN ANALYZE``; MariaDB's ``ANALYZE``) or,
    without ``analyze``, the plan alone (0 records)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
            cursor.execute(f"EXPLAIN ({options}) {sql}", params)
            raw = cursor.fetchone()[0]
            nodes = [(json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]]
            steps, read = [], 0
            while nodes:
                node = nodes.pop()
                nodes += node.get("Plans", [])
                on_effects = node.get("Relation Name") == "headgate_effect"
                if on_effects or "Sort" in node["Node Type"]:
                    steps.append(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
                if on_effects and analyze:
                    read += int(
                        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
                        * node["Actual Loops"]
                    )
            return steps, read
        cursor.execute(f"{'ANALYZE' if analyze else 'EXPLAIN'} {sql}", params)
        names = [c[0] for c in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        mine = [r for r in rows if r["table"] == "headgate_effect"]
        steps = [f"{r['type']} {r['key'] or ''} {r['Extra'] or ''}".strip() for r in mine]
        return steps, int(sum(float(r.get("r_rows") or 0) for r in mine))


def test_a_run_reads_its_slice_through_the_primary_key() -> None:
    _fill()
    first, steps, read = _sweep_explained(0)
    if connection.vendor == "postgresql":
        scans = [s for s in steps if s.startswith(("Seq Scan", "Sort", "Incremental Sort"))]
    else:  # MariaDB: "ALL" is a full scan; a filesort sorts what it read
        scans = [s for s in steps if s.startswith("ALL") or "filesort" in s]
    assert steps  # the plans name the effects table
    assert scans == [], steps
    assert read <= 1_100, (steps, read)  # the slice's records, not the kept jobs' ones
    # The first slice holds records of gone jobs: they went; the next slices only kept
    # ones, each read alone.
    pruned, after = first
    assert pruned == 1000 and after > 0
    assert Effect.objects.filter(job_id__startswith="gone-").count() == GONE - 1000
    (pruned, after), steps, read = _sweep_explained(after)
    assert pruned == 1000
    (pruned, _), steps, read = _sweep_explained(after)
    assert pruned == 0 and read <= 1_100, (steps, read)
    assert Effect.objects.count() == KEPT


def _effect_deletes(run: Any) -> list[str]:
    """The plan steps of the statements ``run`` makes that delete effect records."""
    steps: list[str] = []

    def explain(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "DELETE FROM headgate_effect" in sql and not sql.lstrip().startswith("EXPLAIN"):
            steps.extend(_reads(sql, params, analyze=False)[0])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        run()
    return steps


@pytest.mark.parametrize("path", ["delete at ack", "eviction"])
def test_a_job_s_records_go_with_it_through_their_key(path: str) -> None:
    """Beside many kept records, deleting jobs deletes theirs through the ``(job_id,
    name)`` key. On PostgreSQL the delete at ack names them by the deleted rows' ids, which
    carry the job table's collation: compared in it, the key was not used and every record
    was read (0.6 s for an ack of 100 beside 200,000)."""
    _fill()
    if path == "delete at ack":
        for _ in range(3):
            enqueue_job(queue="fx")
        claimed = store.job_claim(
            worker_id="fx", limit=3, lease_ttl=timedelta(minutes=5), queues=["fx"]
        )

        def run() -> None:
            assert (
                len(store.job_complete_many([Completion(c.ref, delete=True) for c in claimed])) == 3
            )

    else:
        doomed = list(Job.objects.values_list("pk", flat=True)[:3])
        Job.objects.filter(pk__in=doomed).update(expires_at=store.db_now() - timedelta(seconds=1))

        def run() -> None:
            assert sum(store.job_evict_retained(limit=10).values()) == 3

    steps = _effect_deletes(run)
    assert steps
    if connection.vendor == "postgresql":
        assert not [s for s in steps if s.startswith("Seq Scan")], steps
    else:
        assert not [s for s in steps if s.startswith("ALL")], steps

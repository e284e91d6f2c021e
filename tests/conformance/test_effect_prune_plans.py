"""The ``effects-prune`` duty reads its batch of records through an index, oldest first.

Asked for "any N records whose job is gone" in no order, PostgreSQL and MariaDB read the
effects table from its first page, probing each record's job, until N turned up: beside
a large table of records whose jobs are still kept that is a scan of the table every
minute. Read in the order of the ``created_at`` index, the records of evicted jobs (the
oldest) come first. Checked on PostgreSQL and MariaDB with statistics taken after the
fill (SQLite's reads of the job table are checked in ``test_sqlite_plans.py``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from benchmarks.fill import analyze, fill
from headgate_django import store
from headgate_django.models import Effect
from headgate_django.store.effects import effect_prune

pytestmark = [
    # MariaDB commits the transaction at ANALYZE TABLE: the rows are flushed afterwards.
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor == "sqlite", reason="plans of PostgreSQL and MariaDB"),
]

#: Jobs kept with a record each, and records of jobs gone (older).
KEPT, GONE = 100_000, 2_000


def _fill() -> None:
    now = store.db_now()
    with connection.cursor() as cursor:
        fill(cursor, connection.vendor, terminal=KEPT)
        cursor.execute(
            "INSERT INTO headgate_effect (job_id, name, result, fence, created_at) "
            "SELECT id, 'charge', NULL, 1, %s FROM headgate_job",
            [now],
        )
    Effect.objects.bulk_create(
        Effect(job_id=f"gone-{i}", name="charge", fence=1, created_at=now - timedelta(days=9))
        for i in range(GONE)
    )
    with connection.cursor() as cursor:
        analyze(cursor, connection.vendor)
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE headgate_effect")
        else:
            cursor.execute("ANALYZE TABLE headgate_effect")
            cursor.fetchall()


def _prune_explained() -> tuple[list[str], int]:
    """Run a prune of 1,000 records; explain its batch select as it runs (in the prune's
    transaction, with whatever the prune set for it), and return :func:`_reads` of it."""
    explained: list[tuple[list[str], int]] = []

    def explain(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().upper().startswith("SELECT") and "headgate_effect" in sql:
            explained.append(_reads(sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        assert effect_prune(limit=1000) == 1000
    [reads] = explained
    return reads


def _reads(sql: str, params: Any) -> tuple[list[str], int]:
    """The statement's steps on the effects table (and its sorts), and how many records
    they read, as the database ran it (``EXPLAIN ANALYZE``; MariaDB's ``ANALYZE``)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
            raw = cursor.fetchone()[0]
            nodes = [(json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]]
            steps, read = [], 0
            while nodes:
                node = nodes.pop()
                nodes += node.get("Plans", [])
                on_effects = node.get("Relation Name") == "headgate_effect"
                if on_effects or "Sort" in node["Node Type"]:
                    steps.append(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
                if on_effects:
                    read += int(
                        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
                        * node["Actual Loops"]
                    )
            return steps, read
        cursor.execute(f"ANALYZE {sql}", params)
        names = [c[0] for c in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        mine = [r for r in rows if r["table"] == "headgate_effect"]
        steps = [f"{r['type']} {r['key'] or ''} {r['Extra'] or ''}".strip() for r in mine]
        return steps, int(sum(float(r["r_rows"] or 0) for r in mine))


def test_the_batch_is_read_through_an_index_oldest_first() -> None:
    _fill()
    steps, read = _prune_explained()
    assert steps  # the plan names the effects table
    if connection.vendor == "postgresql":
        scans = [s for s in steps if s.startswith(("Seq Scan", "Sort", "Incremental Sort"))]
    else:  # MariaDB: "ALL" is a full scan; a filesort sorts what it read
        scans = [s for s in steps if s.startswith("ALL") or "filesort" in s]
    assert scans == [], steps
    # The batch's records are read, not the kept jobs' ones...
    assert read <= 1_100, (steps, read)
    # ...and they went: the oldest, of jobs gone.
    assert Effect.objects.filter(job_id__startswith="gone-").count() == GONE - 1000
    assert Effect.objects.count() == KEPT + GONE - 1000

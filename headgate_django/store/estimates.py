"""Counts that stay cheap on a table of millions: exact up to a cap, estimated beyond it.

Counting every archived or completed row of a large ``headgate_job`` reads every one of
them, however good the index. A page only needs to tell ten from ten thousand, so a count
reads at most ``cap + 1`` index entries; past the cap it asks the planner how many rows
the same condition matches (PostgreSQL's and MariaDB's ``EXPLAIN`` row estimate, from
table statistics and, on MariaDB, index dives) and says it is an estimate. SQLite, the
embedded default, has no such estimate and counts exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

#: Counts up to this are exact; above it they are the planner's estimate.
EXACT_UP_TO = 1_000


@dataclass(frozen=True)
class Count:
    """How many rows, and whether ``n`` is the planner's estimate rather than a count."""

    n: int
    estimated: bool = False


def capped_count(
    conn: BaseDatabaseWrapper,
    where: str,
    params: list[Any],
    *,
    cap: int = EXACT_UP_TO,
    mysql_index: str | None = None,
) -> Count:
    """Rows of ``headgate_job`` matching ``where``: exact up to ``cap``, estimated above.

    The count reads an index, never the table: a planner whose statistics are stale (a
    backlog just evicted, a state just drained) would otherwise expect the ``LIMIT`` to
    stop a sequential scan early and read every row to find none. PostgreSQL is told so
    for the statement (``enable_seqscan`` off, in its own transaction), MySQL/MariaDB
    through ``mysql_index`` where its choice is not the obvious ``state`` index.
    """
    if conn.vendor == "sqlite":
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM headgate_job WHERE {where}", params)
            return Count(int(cursor.fetchone()[0]))
    hint = f" FORCE INDEX ({mysql_index})" if conn.vendor == "mysql" and mysql_index else ""
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM headgate_job{hint} WHERE {where} LIMIT %s) c",
            [*params, cap + 1],
        )
        exact = int(cursor.fetchone()[0])
        if exact <= cap:
            return Count(exact)
        return Count(max(planner_rows(conn, where, params), exact), estimated=True)


def planner_rows(conn: BaseDatabaseWrapper, where: str, params: list[Any]) -> int:
    """The planner's estimate of the rows of ``headgate_job`` matching ``where``."""
    sql = f"SELECT 1 FROM headgate_job WHERE {where}"
    with conn.cursor() as cursor:
        if conn.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            return int(plan[0]["Plan"]["Plan Rows"])
        cursor.execute(f"EXPLAIN {sql}", params)
        columns = [c[0] for c in cursor.description]
        return sum(int(dict(zip(columns, r, strict=True))["rows"] or 0) for r in cursor.fetchall())

"""On SQLite the duties and the per-enqueue counts find their rows through their partial
indexes, as executed.

SQLite matches a partial index against a statement's text, not the values bound to it:
a duty whose states were bound read the whole job table (promotion every 0.2 s, under
the write lock). Each statement a duty runs is explained here with the parameters it was
run with, on the connection that ran it; none may scan the job table. (PostgreSQL's plans
are checked in ``tests/console/test_query_plans.py``; captured SQL is no help here,
because Django shows it with the values written in.)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from headgate_django import admission, store
from headgate_django.kernel.states import State
from headgate_django.store.claim import job_available
from headgate_django.store.deadlines import job_archive_past_deadline
from headgate_django.store.effect_records import effect_sweep
from tests.conformance.helpers import enqueue_job, job_in_state

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's partial-index matching"),
]

READS: dict[str, Callable[[], Any]] = {
    "promote": lambda: store.job_promote_due(limit=100),
    "reclaim": lambda: store.job_reclaim_expired(limit=100),
    # a crash past the limit quarantines the fingerprint and every job of it still waiting
    "quarantine": lambda: job_in_state(State.QUARANTINED),
    "evict": lambda: store.job_evict_retained(limit=100),
    "eviction backlog": store.job_eviction_backlog,
    "deadlines": job_archive_past_deadline,
    "effects": lambda: effect_sweep(after=0),
    "job available": job_available,
    "claim": lambda: store.job_claim(worker_id="w", limit=10, lease_ttl=timedelta(seconds=30)),
    # every enqueue into a queue with a backpressure limit counts its unfinished jobs
    "backpressure": lambda: (admission.set_backpressure("bp", 100), enqueue_job(queue="bp")),
}


def _table_scans(run: Callable[[], Any]) -> dict[str, list[str]]:
    """The steps that read every row of ``headgate_job``, by statement ``run`` executed."""
    ran: list[tuple[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        ran.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run()
    scans = {}
    for sql, params in ran:
        if "headgate_job" not in sql:
            continue
        # Django's SQLite cursor turns "%s" into "?"; the raw connection needs it done.
        steps = [
            row[3]
            for row in connection.connection.execute(
                "EXPLAIN QUERY PLAN " + sql.replace("%s", "?"), params or ()
            )
        ]
        # "SCAN t USING INDEX i" walks a (partial) index; a bare "SCAN t" reads the table.
        bare = [s for s in steps if s.startswith("SCAN headgate_job") and "INDEX" not in s]
        if bare:
            scans[sql[:200]] = steps
    return scans


@pytest.mark.parametrize("read", sorted(READS))
def test_each_reads_jobs_through_an_index_with_its_values_bound(read: str) -> None:
    for _ in range(3):
        enqueue_job()
    assert _table_scans(READS[read]) == {}

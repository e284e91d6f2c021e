"""A failing workflow condition cancels its node only while the node is still pending.

The coordinator's tick decides from a read made before its transaction; the node can
move meanwhile (an operator promotes it, a worker then claims it). The tick read the
node, then updated it by id alone: waiting behind the other transaction's row lock, it
then cancelled a node that was available (the operator's promote silently undone) or
running, which broke ``headgate_job_running_has_lease`` (a cancelled row still holding
its lease) and failed the whole tick with an ``IntegrityError``.
"""

from __future__ import annotations

import pytest
from django.db import connection

from headgate_django import store
from headgate_django.kernel.workflow import Checkpoint, Plan
from headgate_django.store.workflows import workflow_tick_save
from tests.conformance.helpers import (
    LONG,
    WORKER,
    claim,
    enqueue_job,
    race_behind_a_lock,
    row,
    state_of,
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("moved_to", ["available", "running"])
def test_a_condition_failure_leaves_a_node_that_moved_meanwhile_alone(moved_to):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: one writer at a time")
    node = enqueue_job(pending=True)
    queue = row(node)["queue"]
    coordinator = claim(enqueue_job()).ref

    def operator() -> None:
        """Promote the node (and claim it), in the transaction the race keeps open."""
        store.job_promote(node)
        if moved_to == "running":
            claimed = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG, queues=[queue])
            assert [c.ref.job_id for c in claimed] == [node]

    def tick() -> None:
        """The coordinator's tick, planned from a read that still saw the node pending:
        it waits for the node's row."""
        workflow_tick_save(
            coordinator,
            workflow_id="wf-race",
            checkpoint=Checkpoint(),
            plan=Plan(fail=[(node, "condition raised")]),
        )

    errors = race_behind_a_lock(operator, tick)
    assert errors == []
    assert state_of(node) == moved_to
    assert row(node)["errors"] in (None, [])

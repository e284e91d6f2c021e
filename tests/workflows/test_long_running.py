"""Long-running stages: the seed's cursor-step example inside a workflow node. A reclaimed
lease fences the stale attempt's cursor writes; the next attempt resumes from the last
cursor the store accepted."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from headgate_django import LeaseLostError, enqueue, store, testing
from headgate_django.context import JobContext
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env
from tests.workflows.helpers import claim, coordinator, expire_lease, job, run, runs


def importer(workflow_id: str, pages: int, pause: float = 0.0, queue: str = "default"):
    envelope = replace(tasks.wf_cursor_pages.envelope(pages=pages, pause=pause), queue=queue)
    return (
        Workflow(workflow_id)
        .add("pages", envelope, [])
        .add("after", tasks.record_run.envelope(label="after"), ["pages"])
        .prepare()
    )


@pytest.mark.django_db
def test_a_reclaimed_lease_fences_the_stale_cursor_write_and_the_next_attempt_resumes():
    enqueue(importer("imp", pages=5, queue="pages"))
    testing.run_one(queues=["headgate-workflow"])  # promotes the import node
    stale = JobContext(claim("pages"), worker_id="stale")

    def walk(cursor: bytes | None) -> None:
        assert cursor is None
        stale.set_cursor(b"1")
        stale.set_cursor(b"2")
        # The worker stops renewing (suspended laptop): the store reclaims the lease.
        expire_lease("imp:pages")
        assert store.job_reclaim_expired().retried == ["imp:pages"]
        with pytest.raises(LeaseLostError):
            stale.set_cursor(b"3")
        assert stale.cancelled
        raise LeaseLostError("the stale attempt stops")

    with pytest.raises(LeaseLostError):
        stale.step_cursor("import-pages", walk)
    assert bytes(job("imp:pages").cp_cursor) == b"2"  # the refused write did not land

    run()
    # The new attempt resumed from the last accepted cursor, not from the start.
    assert [r.label for r in runs("imp:pages")] == ["page:2", "page:3", "page:4"]
    assert {r.fence for r in runs("imp:pages")} == {2}
    row = job("imp:pages")
    assert (row.state, row.result, row.crash_attempt) == ("completed", 5, 1)
    assert coordinator("imp").state == "completed"
    assert inspect_workflow("imp").node("after").state == "completed"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_reclaims_a_stalled_stage_and_fences_the_stale_attempt(start_worker):
    # This test process is the stale attempt: it claims the stage with a 1 s lease, saves
    # two cursors and then stalls (never renews), like a suspended laptop.
    enqueue(importer("stall", pages=5, queue="pages"))
    testing.run_one(queues=["headgate-workflow"])  # promotes the stage
    claimed = claim("pages")
    Job.objects.filter(pk="stall:pages").update(
        lease_expires_at=store.db_now() + timedelta(seconds=1)
    )
    stale = JobContext(claimed, worker_id="stalled")
    resumed: list[bytes | None] = []

    def walk(cursor: bytes | None) -> None:
        stale.set_cursor(b"1")
        stale.set_cursor(b"2")
        # A real worker reclaims the expired lease and runs the stage from cursor 2.
        worker = start_worker("--lease-ttl", "5", env=headgate_env(**FAST))
        wait_for(lambda: coordinator("stall").state == "completed", timeout=60)
        resumed.append(worker.pid)
        with pytest.raises(LeaseLostError):
            stale.set_cursor(b"3")  # the stale write is refused...
        raise LeaseLostError("...and the stale attempt stops")

    with pytest.raises(LeaseLostError):
        stale.step_cursor("import-pages", walk)
    assert stale.cancelled
    (worker_pid,) = resumed
    assert [(r.label, r.pid, r.fence) for r in runs("stall:pages")] == [
        (f"page:{page}", worker_pid, 2) for page in (2, 3, 4)
    ]
    row = job("stall:pages")
    assert (row.state, row.result, row.crash_attempt) == ("completed", 5, 1)
    assert row.cp_cursor is None
    assert "stopped renewing" in row.errors[0]["error"]
    assert [r.label for r in runs("stall:after")] == ["after"]

"""The live run's own seed, on top of ``manage.py demo`` (``run_schemathesis.py`` runs it).

The demo has no worker, so none of its workflows has failed and ``POST
/workflows/{id}/retry`` could only answer 409 (not failed) or 422 (not prepared for a
retry): its success path was out of reach whatever the generator sent. This adds one
workflow per phase that has failed and can be reopened with a bare
``{"expected_revision": 1}`` (a reopened one stays reopened: no worker runs),
made the way a project makes one: enqueued through the public API, then run by
``runworkers --burst`` on a queue of its own, so the demo's jobs stay as the demo left
them (available, cancellable).

Run as ``python tests/schema/seed.py`` with the sample project's settings in the
environment; it exits non-zero if the workflow did not end failed.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

#: The queue of the seeded workflow's coordinator and node, served by nothing else.
QUEUE = "schemathesis-seed"
#: The seeded failed workflows, retry-ready at revision 1: one for each phase that
#: generates retries (examples, coverage, fuzzing, stateful).
FAILED_WORKFLOWS = tuple(f"failed-import:{n}" for n in range(1, 5))


def seed_failed_workflows() -> None:
    """Enqueue one-node workflows whose node fails for good on its first attempt, run
    them to the end, and check that they failed."""
    from django.core.management import call_command

    from headgate_django import enqueue
    from headgate_django.workflows import Workflow, inspect_workflow
    from sampleproject.demo import tasks

    # ``pages=None`` fits the signature (so the job is not undecodable, which a retry
    # could only reopen with a replacement payload) and makes ``range`` raise at once;
    # one attempt makes that failure final.
    failing = replace(tasks.import_pages.envelope(pages=None), queue=QUEUE, max_attempts=1)
    for workflow_id in FAILED_WORKFLOWS:
        workflow = (
            Workflow(workflow_id)
            .coordinator_queue(QUEUE)
            .failed_subgraph_retry()
            .add("import", failing, [])
        )
        enqueue(workflow.prepare())
    call_command("runworkers", queue=[QUEUE], burst=True, verbosity=0)
    for workflow_id in FAILED_WORKFLOWS:
        snapshot = inspect_workflow(workflow_id)
        if not snapshot.failed or snapshot.revision != 1:
            raise SystemExit(
                f"{workflow_id}: expected failed at revision 1, got "
                f"{snapshot.coordinator_state} at revision {snapshot.revision}"
            )


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import django

    django.setup()
    seed_failed_workflows()


if __name__ == "__main__":
    main()

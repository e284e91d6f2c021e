"""Real ``runworkers`` processes: the worker running a coordinator tick is SIGKILLed
mid-tick, twice (before and after the tick's transaction commits). The workflow still
finishes, in dependency order, with no node promoted (run) twice and no completion lost."""

from __future__ import annotations

from collections import Counter

import pytest

from headgate_django import enqueue
from headgate_django.workflows import Workflow, inspect_workflow, workflow_events
from tests.app import tasks
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env
from tests.workflows.helpers import coordinator, job, job_state, ms, recorded, run_counts

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NODES = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["d"]}


def paused(marker) -> tuple[int, list[str]]:
    pid, *promoted = wait_for(lambda: marker.exists() and marker.read_text(), 60).split(",")
    return int(pid), promoted


def test_coordinator_killed_mid_tick_finishes_without_double_promotion(start_worker, tmp_path):
    workflow = Workflow("kill")
    for name, deps in NODES.items():
        workflow.add(name, tasks.sleeper.envelope(seconds=0.1, label=name), deps)
    enqueue(workflow.prepare())

    before, after = tmp_path / "before-commit", tmp_path / "after-commit"
    env = headgate_env(**FAST)
    pauses = f"{before}|:d|before-commit;{after}|:e|after-commit"
    # Node tasks run on their own worker (which also runs the maintenance duties), so the
    # kills hit only coordinator ticks. Of the three coordinator workers, the first to
    # promote d pauses inside the tick's transaction, the next to promote e pauses after
    # its commit; the third finishes the workflow.
    runner = start_worker("--queue", "default", "--concurrency", "4", env=env)
    coordinators = {
        w.pid: w
        for w in (
            start_worker(
                "--queue",
                "headgate-workflow",
                "--no-duties",
                "--lease-ttl",
                "1",
                env={**env, "HEADGATE_TEST_TICK_PAUSE": pauses},
            )
            for _ in range(3)
        )
    }

    pid, promoted = paused(before)
    assert promoted == ["kill:d"]
    coordinators.pop(pid).kill()
    # The tick's checkpoint and promotion rolled back together: d is pending again and
    # the completion recorded by that tick (b's or c's) is not in the checkpoint.
    wait_for(lambda: job_state("kill:d") == "pending")
    assert len(recorded("kill")) < 3

    pid, promoted = paused(after)
    assert promoted == ["kill:e"]
    assert recorded("kill") == {"a", "b", "c", "d"}  # committed before the kill
    coordinators.pop(pid).kill()
    assert job_state("kill:e") in {"available", "running", "completed"}

    wait_for(lambda: coordinator("kill").state == "completed", timeout=60)
    (rescuer,) = coordinators.values()

    # Every node ran exactly once: nothing was promoted twice, nothing was lost.
    assert run_counts("kill:") == Counter({f"kill:{name}": 2 for name in NODES})  # start+end
    records = {e.label: e.id for e in Execution.objects.filter(job_id__startswith="kill:")}
    for name, deps in NODES.items():
        for dep in deps:
            assert records[f"start:{name}"] > records[f"end:{dep}"], (name, dep)
            assert job(f"kill:{name}").claimed_at >= job(f"kill:{dep}").finalized_at
    snapshot = inspect_workflow("kill")
    assert {n.name: n.state for n in snapshot.nodes} == dict.fromkeys(NODES, "completed")
    for name in NODES:
        assert snapshot.node(name).completed_at_ms == ms(job(f"kill:{name}").finalized_at)
    events = workflow_events("kill")
    completed_events = Counter(e["node"] for e in events if e["event"] == "node_completed")
    assert completed_events == Counter(list(NODES))
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "workflow_succeeded"
    # Both killed attempts were charged as crashes and fenced out.
    row = coordinator("kill")
    assert row.crash_attempt == 2
    assert [e["kind"] for e in row.errors] == ["crash", "crash"]
    assert rescuer.terminate() == 0
    assert runner.terminate() == 0

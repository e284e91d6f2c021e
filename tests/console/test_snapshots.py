"""A live page is sent only what changed: one node's patch, not the whole graph."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from headgate_django.console.snapshots import diff, workflow_snapshot
from tests.console.conftest import signal_workflow


@pytest.fixture
def snap(db: Any) -> dict[str, Any]:
    signal_workflow("diff-wf")
    return workflow_snapshot("diff-wf", reveal=True, job_url=lambda job_id: f"/j/{job_id}")


def test_nothing_changed_sends_nothing(snap: dict[str, Any]) -> None:
    assert diff(snap, copy.deepcopy(snap)) is None


def test_a_node_change_sends_that_node_and_the_counts(snap: dict[str, Any]) -> None:
    new = copy.deepcopy(snap)
    new["nodes"][0].update(state="completed", done=True)
    new["counts"] = {"completed": 1, "pending": 2}
    patch = diff(snap, new)
    assert patch == {
        "type": "patch",
        "header": {"counts": {"completed": 1, "pending": 2}},
        "nodes": [new["nodes"][0]],
    }


def test_a_new_shape_sends_the_whole_snapshot(snap: dict[str, Any]) -> None:
    new = copy.deepcopy(snap)
    new["graph_key"] = "grafted"
    assert diff(snap, new) == {"type": "snapshot", "snapshot": new}


def _status(workflow_id: str) -> tuple[str, str]:
    snap = workflow_snapshot(workflow_id, reveal=False, job_url=lambda job_id: "")
    return snap["status"], snap["status_detail"]


def test_a_workflow_that_waits_for_a_signal_says_so(db: Any) -> None:
    from headgate_django import testing
    from headgate_django.workflows import SignalEmission, emit_signal_with

    signal_workflow("words-wf")
    assert _status("words-wf") == ("running", "")  # extract is available: it progresses
    testing.run_jobs(include_scheduled=True)
    assert _status("words-wf") == ("waiting", "signal approved")
    emit_signal_with("words-wf", SignalEmission("approved", "k-1"))
    testing.run_jobs(include_scheduled=True)
    assert _status("words-wf") == ("succeeded", "")


def test_a_failed_workflow_says_why(db: Any) -> None:
    from headgate_django import enqueue, testing
    from headgate_django.workflows import Workflow
    from tests.app import tasks

    enqueue(Workflow("doomed-wf").add("boom", tasks.always_fail.envelope(), []).prepare())
    testing.run_jobs(include_scheduled=True)
    status, detail = _status("doomed-wf")
    assert status == "failed" and "boom" in detail

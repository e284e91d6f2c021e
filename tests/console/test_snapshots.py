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

"""Arguments of the wrong type are refused with a ``DefinitionError`` that names them,
not with whatever the first operation on them happens to raise."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headgate_django import enqueue
from headgate_django.exceptions import DefinitionError
from headgate_django.workflows import (
    Workflow,
    WorkflowGraft,
    list_signals,
    list_workflows,
    request_failed_subgraph_retry,
)
from tests.app import tasks


def a_task():
    return tasks.record_run.envelope(label="a")


@pytest.mark.parametrize(
    "build",
    [
        lambda: Workflow("t:1").add("a", a_task(), []).add_timer_after("t", 30, ["a"]),
        lambda: Workflow("t:1").retention(30),
        lambda: Workflow("t:1").automatic_retry(3, 5),
        lambda: Workflow("t:1").automatic_retry("3", timedelta(seconds=1)),
        lambda: Workflow("t:1").automatic_retry(True, timedelta(seconds=1)),
    ],
    ids=["timer-delay-int", "retention-int", "backoff-int", "generations-str", "generations-bool"],
)
def test_builder_refuses_wrong_types(build) -> None:
    with pytest.raises(DefinitionError, match="must be"):
        build()


@pytest.mark.parametrize(
    ("workflow_id", "revision"), [(5, 1), ("", 1), ("w", True)], ids=["id-int", "id-empty", "bool"]
)
def test_graft_refuses_wrong_types(workflow_id, revision) -> None:
    with pytest.raises(DefinitionError):
        WorkflowGraft(workflow_id, revision)


@pytest.mark.django_db
def test_signal_history_refuses_a_cursor_that_is_not_an_id() -> None:
    enqueue(Workflow("t:2").add_signal("s", "go", []).prepare())
    with pytest.raises(DefinitionError, match="before must be an emission id"):
        list_signals("t:2", before="x")
    with pytest.raises(DefinitionError, match="limit must be"):
        list_signals("t:2", limit="10")


@pytest.mark.django_db
def test_retry_refuses_a_revision_that_is_not_an_integer() -> None:
    enqueue(Workflow("t:3").failed_subgraph_retry().add("a", a_task(), []).prepare())
    with pytest.raises(DefinitionError, match="expected_revision must be an integer"):
        request_failed_subgraph_retry("t:3", "1")


@pytest.mark.django_db
def test_workflow_list_refuses_a_limit_or_cursor_of_the_wrong_type() -> None:
    with pytest.raises(DefinitionError, match="limit must be an integer"):
        list_workflows(limit="10")
    with pytest.raises(DefinitionError, match="cursor must be a workflow id"):
        list_workflows(cursor=5)

"""Workers' wake-up messages: sent after the commit, from sync or async code, never on the
in-memory layer (where no other process could hear them)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.db import connection, transaction

from headgate_django.console import publish
from headgate_django.console.groups import execution_group, group_of_job_group, workflow_group


class FakeLayer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


def test_job_groups_map_to_live_groups() -> None:
    assert group_of_job_group("wf-1") == workflow_group("wf-1")
    assert group_of_job_group("durable:ex-1") == execution_group("ex-1")
    name = workflow_group("a/b c:" + "x" * 300)
    assert len(name) < 100 and name.replace(".", "").isalnum()


def test_publish_from_sync_and_from_an_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = FakeLayer()
    monkeypatch.setattr(publish, "cross_process_layer", lambda: layer)
    publish.publish(["g1"])

    async def inside_a_handler() -> None:
        publish.publish(["g2"])
        await asyncio.sleep(0.01)

    asyncio.run(inside_a_handler())
    assert layer.sent == [
        ("g1", {"type": "headgate.changed"}),
        ("g2", {"type": "headgate.changed"}),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_hook_publishes_after_commit_only(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = FakeLayer()
    monkeypatch.setattr(publish, "cross_process_layer", lambda: layer)
    with transaction.atomic():
        publish._on_finish(
            None, connection, {"wf-1", "durable:ex-1"}, {"wf-1:a", "durable:ex-1:task"}
        )
        assert layer.sent == []
    assert sorted(g for g, _ in layer.sent) == sorted(
        [workflow_group("wf-1"), execution_group("ex-1")]
    )
    with pytest.raises(RuntimeError), transaction.atomic():
        publish._on_finish(None, connection, {"wf-2"}, {"wf-2:a"})
        raise RuntimeError("rolled back")
    assert workflow_group("wf-2") not in [g for g, _ in layer.sent]


@pytest.mark.django_db(transaction=True)
def test_the_in_memory_layer_publishes_nothing() -> None:
    assert publish.cross_process_layer() is None
    with transaction.atomic():
        publish._on_finish(None, connection, {"wf-1"}, {"wf-1:a"})
        assert connection.run_on_commit == []

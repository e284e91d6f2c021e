"""Fan-outs of alike nodes collapse into one group node; expanded groups, unlike nodes and
small fan-outs are drawn one by one; the layout bundles the edges of busy nodes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from headgate_django import enqueue, testing
from headgate_django.console.consumers import LiveConsumer
from headgate_django.console.fanout import GROUP_MIN, collapse, group_id
from headgate_django.console.layout import BUNDLE_MIN, _compute
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.console.test_consumers import communicator, nodes_in, open_pages, received


def node(name: str, deps: list[str], job_kind: str = "etl.load") -> dict[str, Any]:
    return {"name": name, "kind": "task", "job_kind": job_kind, "deps": deps}


def fan(width: int, odd: str | None = None) -> list[dict[str, Any]]:
    tasks = [node(f"t{i}", ["root"], odd if odd and i == 0 else "etl.load") for i in range(width)]
    return [node("root", []), *tasks, node("join", [t["name"] for t in tasks])]


def test_a_wide_fan_out_is_one_group_node_with_one_edge_in_and_out() -> None:
    drawn = collapse(fan(26))
    gid = group_id("t0")
    assert drawn.items == ["root", gid, "join"]
    assert drawn.edges == [(0, 1), (1, 2)]
    assert drawn.groups == [{"id": gid, "members": [f"t{i}" for i in range(26)], "expanded": False}]


def test_expanded_small_and_unlike_fan_outs_are_drawn_node_by_node() -> None:
    assert len(collapse(fan(26), expanded=[group_id("t0")]).items) == 28
    assert len(collapse(fan(GROUP_MIN - 1)).items) == GROUP_MIN + 1
    odd = collapse(fan(GROUP_MIN, odd="etl.other"))  # one differs: 7 alike left
    assert odd.groups == []


def test_edges_of_a_busy_node_leave_and_arrive_as_one_trunk() -> None:
    width = BUNDLE_MIN + 2
    edges = [(0, i) for i in range(1, width + 1)] + [(i, width + 1) for i in range(1, width + 1)]
    layout = _compute(width + 2, edges)
    firsts = {tuple(bends[0]) for source, _, bends in layout["edges"] if source == 0}
    lasts = {tuple(bends[-1]) for _, target, bends in layout["edges"] if target == width + 1}
    assert len(firsts) == 1 and len(lasts) == 1  # shared split and merge points


def fan_workflow(workflow_id: str) -> str:
    """A root and a fan-out of :data:`GROUP_MIN` alike tasks after it; the group's id."""
    wf = Workflow(workflow_id).add("root", tasks.noop.envelope(), [])
    for i in range(GROUP_MIN):
        wf.add(f"t{i}", tasks.noop.envelope(), ["root"])
    enqueue(wf.prepare())
    return group_id("t0")


@pytest.mark.django_db(transaction=True)
def test_the_page_expands_and_collapses_a_group_over_its_socket(viewer: Any) -> None:
    gid = fan_workflow("fan-wf")

    async def scenario() -> None:
        comm = communicator("/ws/headgate/workflows/fan-wf/", viewer)
        assert (await comm.connect(timeout=10))[0]
        first = (await comm.receive_json_from(timeout=10))["snapshot"]
        assert first["drawn"] == ["root", gid]
        for junk in ({"type": "expand", "groups": "nope"}, {"type": "delete"}, [1]):
            await comm.send_json_to(junk)  # ignored: nothing comes back
        assert await comm.receive_nothing(timeout=0.5)
        await comm.send_json_to({"type": "expand", "groups": [gid, "not-a-group"]})
        opened = (await comm.receive_json_from(timeout=10))["drawing"]
        assert len(opened["drawn"]) == GROUP_MIN + 1
        assert opened["groups"][0]["expanded"] is True
        await comm.send_json_to({"type": "expand", "groups": []})
        closed = (await comm.receive_json_from(timeout=10))["drawing"]
        assert closed["drawn"] == ["root", gid]
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_pages_that_share_a_workflows_reads_keep_the_groups_each_expanded(viewer: Any) -> None:
    """The sockets of one graph page share its snapshot; which groups are drawn expanded
    is each page's own: a change redraws neither page with the other's groups."""
    gid = fan_workflow("fan-shared-wf")
    path = "/ws/headgate/workflows/fan-shared-wf/"
    expanded_drawing = ["root", *(f"t{i}" for i in range(GROUP_MIN))]

    async def scenario() -> None:
        (opening, first), (staying, _) = await open_pages(path, [viewer, viewer])
        assert first["drawn"] == ["root", gid]
        await opening.send_json_to({"type": "expand", "groups": [gid]})
        assert (await opening.receive_json_from(timeout=10))["drawing"]["drawn"] == (
            expanded_drawing
        )
        ((later, later_first),) = await open_pages(f"{path}?expand={gid}", [viewer])
        assert later_first["drawn"] == expanded_drawing
        await database_sync_to_async(testing.run_jobs)()
        for comm, drawn in ((opening, expanded_drawing), (staying, ["root", gid])):
            sent = []
            while not any(n["name"] == "t0" and n["done"] for m in sent for n in nodes_in(m)):
                sent.append(await comm.receive_json_from(timeout=10))
            await asyncio.sleep(2 * LiveConsumer.poll_interval)
            sent += await received(comm)
            # A patch keeps the page's drawing; a whole snapshot would redraw it.
            assert [m.get("snapshot", {}).get("drawn", drawn) for m in sent] == [drawn] * len(sent)
        for comm in (opening, staying, later):
            await comm.disconnect()

    async_to_sync(scenario)()

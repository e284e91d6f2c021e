"""Fan-outs of many similar nodes drawn as one group node, so large graphs stay readable.

A workflow of 999 nodes is usually a few dozen steps, some of which fan out into tens of
alike tasks (one per file, per customer, per shard). Drawn one by one they are a wall of
boxes with hundreds of crossing edges; drawn as one node that says "26 × load-shard" with
per-state counts, the shape of the workflow shows at a readable zoom. Nodes are *alike*
when they have the same node kind, the same job kind, the same dependencies and the same
dependents: then one node with one edge in and one edge out says everything the edges
did. A group expands on request (a click on the page); the layout is then computed for
the graph with that group's members drawn one by one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

#: Fewer alike nodes than this are drawn one by one.
GROUP_MIN = 8
#: At most this many groups may be asked expanded at once (a page's request).
MAX_EXPANDED = 200
GROUP_PREFIX = "group:"


@dataclass(frozen=True)
class Drawn:
    """What the page draws: ``items`` are node names and group ids, ``edges`` index them."""

    items: list[str]
    edges: list[tuple[int, int]]
    groups: list[dict[str, Any]]


def group_id(first_member: str) -> str:
    return GROUP_PREFIX + first_member


def collapse(nodes: Sequence[dict[str, Any]], expanded: Collection[str] = ()) -> Drawn:
    """Group alike nodes (see the module docstring); ``expanded`` group ids stay apart.
    ``nodes`` are snapshot node dicts (``name``, ``kind``, ``job_kind``, ``deps``)."""
    dependents: dict[str, list[str]] = {n["name"]: [] for n in nodes}
    for node in nodes:
        for dep in node["deps"]:
            if dep in dependents:
                dependents[dep].append(node["name"])
    alike: dict[tuple[Any, ...], list[str]] = {}
    for node in nodes:
        key = (
            node["kind"],
            node["job_kind"],
            tuple(sorted(node["deps"])),
            tuple(sorted(dependents[node["name"]])),
        )
        alike.setdefault(key, []).append(node["name"])
    member_of: dict[str, str] = {}
    groups: list[dict[str, Any]] = []
    for members in alike.values():
        if len(members) < GROUP_MIN:
            continue
        gid = group_id(members[0])
        open_ = gid in expanded
        groups.append({"id": gid, "members": members, "expanded": open_})
        if not open_:
            member_of.update((m, gid) for m in members)
    items: list[str] = []
    index: dict[str, int] = {}
    for node in nodes:
        drawn = member_of.get(node["name"], node["name"])
        if drawn not in index:
            index[drawn] = len(items)
            items.append(drawn)
    edges: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for node in nodes:
        target = index[member_of.get(node["name"], node["name"])]
        for dep in node["deps"]:
            if dep not in dependents:
                continue
            edge = (index[member_of.get(dep, dep)], target)
            if edge not in seen and edge[0] != edge[1]:
                seen.add(edge)
                edges.append(edge)
    return Drawn(items, edges, groups)

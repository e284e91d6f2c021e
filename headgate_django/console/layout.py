"""Layered (Sugiyama) layout of a workflow graph, computed by igraph on the server.

Why igraph and why here: the graph page must draw a 999-node workflow in well under a
second. dagre, the usual in-browser choice, took 0.9–40 s for 999-node DAGs in V8 on the
reference machine (see ``docs/console.md``); igraph's C implementation of the Sugiyama
method (cycle removal, longest-path layering, barycentric crossing reduction, coordinate
assignment with dummy vertices routing long edges) takes ~0.1 s. The browser then only
draws positioned boxes and polylines.

Why cached: the shape of a workflow changes only when a graft raises its revision, so a
layout is computed once per shape (keyed by :func:`graph_key`) and shared by every viewer
and every live update of this process.

The layout flows left to right: igraph's layers become columns.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

NODE_WIDTH = 184
NODE_HEIGHT = 50
RANK_GAP = 72  # horizontal space between two columns, where the edges run
ROW_GAP = 16
MARGIN = 24
_CACHE_SIZE = 64

_cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
_lock = threading.Lock()


def graph_key(names: Sequence[str], edges: Sequence[tuple[int, int]]) -> str:
    """A digest of the graph's shape: node names in order and their dependency edges."""
    return hashlib.sha256(json.dumps([list(names), list(edges)]).encode()).hexdigest()[:32]


def layered_layout(key: str, node_count: int, edges: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Node centres and edge polylines, in pixels, for ``node_count`` nodes and ``edges``
    given as ``(dependency index, dependent index)`` pairs; cached by ``key``."""
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    layout = _compute(node_count, edges)
    with _lock:
        _cache[key] = layout
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return layout


def _compute(node_count: int, edges: Sequence[tuple[int, int]]) -> dict[str, Any]:
    import igraph  # imported on first use: only graph pages need it

    graph = igraph.Graph(n=node_count, edges=list(edges), directed=True)
    outs = graph.outdegree()
    ins = graph.indegree()
    result = graph.layout_sugiyama(hgap=1, vgap=1)
    coords = _separated(result.coords[:node_count])
    min_slot = min((slot for slot, _ in coords), default=0.0)

    def place(slot: float, layer: float) -> list[int]:
        x = MARGIN + layer * (NODE_WIDTH + RANK_GAP) + NODE_WIDTH / 2
        y = MARGIN + (slot - min_slot) * (NODE_HEIGHT + ROW_GAP) + NODE_HEIGHT / 2
        return [round(x), round(y)]

    positions = [place(slot, layer) for slot, layer in coords]
    routed = [
        [source, target, _bundled(source, target, positions, outs, ins, bends_px)]
        for (source, target), bends in zip(edges, result.edge_routing, strict=True)
        for bends_px in [[place(slot, layer) for slot, layer in bends]]
    ]
    width = max((p[0] for p in positions), default=0) + NODE_WIDTH / 2 + MARGIN
    height = max((p[1] for p in positions), default=0) + NODE_HEIGHT / 2 + MARGIN
    return {
        "width": round(width),
        "height": round(height),
        "node": [NODE_WIDTH, NODE_HEIGHT],
        "positions": positions,
        "edges": routed,
    }


#: A node with at least this many edges out (or in) sends (or takes) them as one bundle.
BUNDLE_MIN = 3
#: Where a bundle splits, as a share of the gap between two columns.
_SPLIT = 0.3


def _bundled(
    source: int,
    target: int,
    positions: Sequence[Sequence[int]],
    outs: Sequence[int],
    ins: Sequence[int],
    bends: list[list[int]],
) -> list[list[int]]:
    """Bends of one edge, with the shared first (fan-out) or last (fan-in) point that makes
    the edges of a busy node leave or arrive as one trunk, instead of a fan of separate
    curves crossing everything near the node."""
    points = list(bends)
    offset = NODE_WIDTH / 2 + RANK_GAP * _SPLIT
    if outs[source] >= BUNDLE_MIN:
        x, y = positions[source]
        points.insert(0, [round(x + offset), y])
    if ins[target] >= BUNDLE_MIN:
        x, y = positions[target]
        points.append([round(x - offset), y])
    return points


def _separated(coords: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    """igraph 1.0 can give two vertices of one layer the same slot (seen on wide fan-outs);
    push such a vertex one slot past its neighbour so no two boxes ever overlap. igraph's
    layering and order are kept; only exact collisions move."""
    placed = [(float(slot), float(layer)) for slot, layer in coords]
    by_layer: dict[float, list[int]] = {}
    for index, (_, layer) in enumerate(placed):
        by_layer.setdefault(layer, []).append(index)
    for members in by_layer.values():
        members.sort(key=lambda i: placed[i][0])
        for previous, current in itertools.pairwise(members):
            floor = placed[previous][0] + 1
            if placed[current][0] < floor:
                placed[current] = (floor, placed[current][1])
    return placed

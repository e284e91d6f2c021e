"""The layered layout (igraph's Sugiyama) as the page uses it: left-to-right columns by
dependency depth, no overlapping boxes, long edges routed, computed once per shape."""

from __future__ import annotations

import itertools
from collections import defaultdict

from headgate_django.console import layout as layout_module
from headgate_django.console.layout import NODE_HEIGHT, NODE_WIDTH, graph_key, layered_layout


def staged(width: int, stages: int) -> tuple[int, list[tuple[int, int]]]:
    """``stages`` columns of ``width`` tasks, each waiting for a barrier node."""
    edges: list[tuple[int, int]] = []
    count, barrier = 1, 0
    for _ in range(stages):
        tasks = list(range(count, count + width))
        count += width
        edges += [(barrier, t) for t in tasks]
        edges += [(t, count) for t in tasks]
        barrier = count
        count += 1
    return count, edges


def test_columns_follow_dependencies_and_boxes_never_overlap() -> None:
    n, edges = staged(30, 32)  # 993 nodes, the size the console promises to draw
    result = layered_layout(graph_key([str(i) for i in range(n)], edges), n, edges)
    pos = result["positions"]
    assert len(pos) == n and result["node"] == [NODE_WIDTH, NODE_HEIGHT]
    for source, target in edges:
        assert pos[target][0] - pos[source][0] >= NODE_WIDTH, (source, target)
    columns: dict[int, list[int]] = defaultdict(list)
    for x, y in pos:
        columns[x].append(y)
    for ys in columns.values():
        ys.sort()
        assert all(b - a >= NODE_HEIGHT for a, b in itertools.pairwise(ys))
    assert max(x for x, _ in pos) + NODE_WIDTH / 2 <= result["width"]
    assert max(y for _, y in pos) + NODE_HEIGHT / 2 <= result["height"]


def test_a_long_edge_is_routed_through_the_columns_it_skips() -> None:
    edges = [(0, 1), (1, 2), (0, 2)]  # 0 → 2 skips column 1
    result = layered_layout(graph_key(["a", "b", "c"], edges), 3, edges)
    source, target, bends = result["edges"][2]
    assert (source, target) == (0, 2) and len(bends) == 1
    assert bends[0][0] == result["positions"][1][0]


def test_a_shape_is_laid_out_once(monkeypatch) -> None:
    edges = [(0, 1)]
    key = graph_key(["cache-a", "cache-b"], edges)
    first = layered_layout(key, 2, edges)
    monkeypatch.setattr(layout_module, "_compute", lambda *a: (_ for _ in ()).throw(AssertionError))
    assert layered_layout(key, 2, edges) is first
    assert graph_key(["cache-a", "cache-b"], []) != key

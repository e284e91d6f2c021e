"""The mermaid diagram in ``docs/explanation/state-machine.md`` is the state table.

Every transition of ``kernel.states.TRANSITIONS`` must appear in the diagram as
``source --> target : event``, and the diagram must show no other transition. ``[*]``
edges mark the states a job can be enqueued in, which must be exactly those the enqueue
path writes.
"""

from __future__ import annotations

import re

from headgate_django.kernel.states import TRANSITIONS, State
from tests.docs.markdown import DOCS, blocks

PAGE = DOCS / "explanation" / "state-machine.md"
_EDGE = re.compile(r"^\s*(?P<src>\[\*\]|\w+)\s*-->\s*(?P<dst>\w+)\s*(?::\s*(?P<label>\S.*?))?\s*$")
#: The states ``store.job_insert_many`` writes: pending, a future schedule, or available.
ENQUEUE_STATES = {State.PENDING.value, State.SCHEDULED.value, State.AVAILABLE.value}


def _diagram() -> list[str]:
    found = [b for b in blocks(PAGE) if b.lang == "mermaid"]
    assert len(found) == 1, "the page should hold exactly one mermaid diagram"
    lines = [line for line in found[0].code.splitlines() if line.strip()]
    assert lines[0].strip() == "stateDiagram-v2"
    return lines[1:]


def _table_edges() -> set[tuple[str, str, str]]:
    return {
        (src.value, dst.value, event.value)
        for (src, event), targets in TRANSITIONS.items()
        for dst in targets
    }


def _diagram_edges() -> tuple[set[tuple[str, str, str]], set[str]]:
    edges: set[tuple[str, str, str]] = set()
    entries: set[str] = set()
    for line in _diagram():
        match = _EDGE.match(line)
        assert match is not None, f"not an edge: {line!r}"
        if match["src"] == "[*]":
            assert match["label"] is None, f"an entry edge has no event: {line!r}"
            entries.add(match["dst"])
            continue
        assert match["label"], f"a transition needs its event as the label: {line!r}"
        edge = (match["src"], match["dst"], match["label"])
        assert edge not in edges, f"drawn twice: {line!r}"
        edges.add(edge)
    return edges, entries


def expected_diagram() -> str:
    """The diagram as it should read, to paste into the page when the table changes."""
    order = list(State)
    lines = [
        "stateDiagram-v2",
        *(f"    [*] --> {s}" for s in sorted(ENQUEUE_STATES, key=order.index)),
    ]
    for (src, event), targets in sorted(
        TRANSITIONS.items(), key=lambda item: (order.index(item[0][0]), item[0][1].value)
    ):
        lines += [
            f"    {src.value} --> {dst.value} : {event.value}"
            for dst in sorted(targets, key=order.index)
        ]
    return "\n".join(lines)


def test_every_transition_of_the_table_is_drawn_and_no_other():
    drawn, _ = _diagram_edges()
    table = _table_edges()
    assert drawn == table, (
        f"missing from the diagram: {sorted(table - drawn)}; "
        f"not in the table: {sorted(drawn - table)}\n\nexpected:\n{expected_diagram()}"
    )


def test_entry_states_are_the_enqueue_states():
    _, entries = _diagram_edges()
    assert entries == ENQUEUE_STATES


def test_every_state_is_named_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    for state in State:
        assert f"`{state.value}`" in text, f"state {state.value} is not described"

"""What the workflow page shows, as one JSON-ready dict, and the difference between two.

The page is drawn from a *snapshot*: the graph with every node's state and job detail,
its layout, the event timeline and the signal history. The first one is embedded in
the page; afterwards the WebSocket sends only :func:`diff` of the last two, so a node
finishing in a 999-node workflow costs one small message, not the whole graph again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from headgate_django.console.fanout import collapse
from headgate_django.console.layout import graph_key, layered_layout
from headgate_django.store.console import node_job_details
from headgate_django.store.workflows import from_ms
from headgate_django.workflows import WorkflowNode, inspect_workflow, list_signals, workflow_events

#: Node kinds that count as done only with the coordinator's evidence (they buffer).
_BUFFERED = {"signal", "timer", "condition"}
_STATUS_BY_COORDINATOR = {"completed": "succeeded", "archived": "failed", "cancelled": "cancelled"}
HEADER_KEYS = (
    "status",
    "status_detail",
    "coordinator",
    "revision",
    "generation",
    "failed",
    "counts",
    "signals_revealed",
)


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def ms_iso(value: int | None) -> str | None:
    return None if value is None else from_ms(value).isoformat()


def _wait(node: WorkflowNode) -> dict[str, Any] | None:
    """What a signal, timer, condition or child-workflow node waits for."""
    if node.kind == "signal":
        return {"signal": node.signal}
    if node.kind == "timer":
        return {"wake_at": ms_iso(node.wake_at_ms), "delay_ms": node.delay_ms}
    if node.kind == "condition":
        return {"condition": node.condition}
    if node.kind == "child_workflow":
        return {"child_workflow_id": node.child_workflow_id}
    return None


def _error(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if not entry:
        return None
    return {
        "attempt": entry.get("attempt"),
        "kind": entry.get("kind"),
        "at": entry.get("at"),
        "error": str(entry.get("error") or "")[:500],
    }


def _node(node: WorkflowNode, job: dict[str, Any] | None, job_url: Callable[[str], str]):
    done = node.completed_at_ms is not None or (
        node.kind not in _BUFFERED and node.state == "completed"
    )
    job = job or {}
    return {
        "name": node.name,
        "job_id": node.job_id,
        "kind": node.kind,
        "job_kind": node.job_kind,
        "state": node.state,
        "done": done,
        "deps": list(node.dependencies),
        "attempt": job.get("attempt"),
        "crash_attempt": job.get("crash_attempt"),
        "max_attempts": job.get("max_attempts"),
        "queue": job.get("queue"),
        "claimed_at": iso(job.get("claimed_at")),
        "finalized_at": iso(job.get("finalized_at")),
        "completed_at": ms_iso(node.completed_at_ms),
        "last_error": _error(job.get("last_error")),
        "wait": _wait(node),
        "url": job_url(node.job_id) if job else None,
    }


def _signal(record: Any, reveal: bool) -> dict[str, Any]:
    item = {
        "id": record.id,
        "signal": record.signal,
        "idempotency_key": record.idempotency_key,
        "emitted_at": iso(record.emitted_at),
    }
    if reveal:
        item.update(payload=record.payload, source=record.source)
    return item


#: Node states in which a workflow is making progress by itself.
_ACTIVE = {"available", "running", "retryable"}


def _status(
    coordinator_state: str, failed: bool, nodes: list[dict[str, Any]], events: list[dict[str, Any]]
) -> tuple[str, str]:
    """The workflow's status word and what it is about, in words a person reads.

    A running workflow in which nothing runs but one or more signal or timer nodes whose
    dependencies are done is *waiting*, for that signal or until that instant; a failed
    one says why (its ``workflow_failed`` event).
    """
    status = _STATUS_BY_COORDINATOR.get(coordinator_state, "failed" if failed else "running")
    if status == "failed":
        reasons = [e.get("reason") for e in events if e.get("event") == "workflow_failed"]
        return status, str(reasons[0] or "") if reasons else ""
    if status != "running" or any(n["state"] in _ACTIVE and not n["wait"] for n in nodes):
        return status, ""
    done = {n["name"] for n in nodes if n["done"]}
    waits = [n for n in nodes if n["wait"] and not n["done"] and all(d in done for d in n["deps"])]
    what = [
        f"signal {n['wait']['signal']}"
        if "signal" in n["wait"]
        else f"timer until {n['wait']['wake_at']}"
        for n in waits
        if "signal" in n["wait"] or n["wait"].get("wake_at")
    ]
    return ("waiting", ", ".join(what)) if what else (status, "")


def workflow_snapshot(
    workflow_id: str,
    *,
    reveal: bool,
    job_url: Callable[[str], str],
    expanded: Collection[str] = (),
) -> dict[str, Any]:
    """Everything the workflow page draws. Raises ``NotFoundError`` for an unknown id.

    Fan-outs of alike nodes are drawn as one group node (:mod:`.fanout`) unless their
    group id is in ``expanded``; ``nodes`` always lists every node, ``drawn`` what the
    layout places. Signal payloads and sources are user data: only with ``reveal``
    (:func:`headgate_django.visibility.may_see_payloads`)."""
    snap = inspect_workflow(workflow_id)
    jobs = node_job_details([n.job_id for n in snap.nodes])
    nodes = [_node(n, jobs.get(n.job_id), job_url) for n in snap.nodes]
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node["state"]] = counts.get(node["state"], 0) + 1
    has_signals = any(n.kind == "signal" for n in snap.nodes)
    signals = list_signals(workflow_id, limit=100) if has_signals else []
    events = [_event(e) for e in reversed(workflow_events(workflow_id))]
    status, status_detail = _status(snap.coordinator_state, snap.failed, nodes, events)
    return {
        "workflow_id": workflow_id,
        "status": status,
        "status_detail": status_detail,
        "coordinator": {
            "job_id": snap.coordinator_job_id,
            "state": snap.coordinator_state,
            "url": job_url(snap.coordinator_job_id),
        },
        "revision": snap.revision,
        "generation": snap.generation,
        "failed": snap.failed,
        "failed_subgraph_retry": snap.failed_subgraph_retry,
        "counts": counts,
        "nodes": nodes,
        "events": events,
        "signals": [_signal(s, reveal) for s in signals],
        "signals_revealed": reveal,
        **_drawing(nodes, expanded),
    }


def _drawing(nodes: list[dict[str, Any]], expanded: Collection[str]) -> dict[str, Any]:
    """What the layout places (fan-outs grouped unless ``expanded``) and where."""
    drawn = collapse(nodes, expanded)
    key = graph_key(drawn.items, drawn.edges)
    return {
        "graph_key": key,
        "drawn": drawn.items,
        "groups": drawn.groups,
        "layout": layered_layout(key, len(drawn.items), drawn.edges),
    }


def regroup(snapshot: dict[str, Any], expanded: Collection[str]) -> dict[str, Any]:
    """The drawing of ``snapshot`` with other groups expanded (``graph_key``, ``drawn``,
    ``groups``, ``layout``), without reading the store again: a click on a group costs a
    layout (cached per shape) and a small message, not a snapshot."""
    return _drawing(snapshot["nodes"], expanded)


def _event(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "at": ms_iso(entry.get("at_ms"))}


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """The message that turns a page showing ``old`` into one showing ``new``; None when
    nothing visible changed. A different graph shape (a graft) sends the whole snapshot."""
    if old.get("graph_key") != new.get("graph_key"):
        return {"type": "snapshot", "snapshot": new}
    patch: dict[str, Any] = {}
    header = {k: new[k] for k in HEADER_KEYS if old.get(k) != new.get(k)}
    if header:
        patch["header"] = header
    changed = [n for o, n in zip(old["nodes"], new["nodes"], strict=True) if o != n]
    if changed:
        patch["nodes"] = changed
    for key in ("events", "signals"):
        if old.get(key) != new.get(key):
            patch[key] = new[key]
    return {"type": "patch", **patch} if patch else None

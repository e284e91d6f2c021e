"""What the durable execution page shows: header, history timeline, Operations, timers,
and the parent and children of a child execution.

Operations are read off the history (``OperationScheduled`` and its facts) and joined
with their jobs, so the page can point at the Operation the execution is waiting for
and highlight the uncertain ones an operator has to decide. Inputs, results and signal
payloads inside events are user data (:mod:`headgate_django.visibility`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headgate_django.console.groups import DURABLE_PREFIX
from headgate_django.console.snapshots import iso
from headgate_django.exceptions import NotFoundError
from headgate_django.store.console import execution_detail, execution_jobs
from headgate_django.store.durable_children import children_of
from headgate_django.visibility import public_event_values

_OUTCOME = {
    "OperationCompleted": "completed",
    "OperationFailed": "failed",
    "OperationUncertain": "uncertain",
    "OperationUncertainResolved": "resolved",
}


def _event(row: Any, reveal: bool) -> dict[str, Any]:
    summary = public_event_values(row.payload)
    item = {"seq": row.seq, "type": row.type, "at": iso(row.at), "summary": summary}
    if reveal:
        item["payload"] = row.payload if isinstance(row.payload, dict) else {}
    return item


def _operations(events: list[Any], jobs: dict[str, dict[str, Any]], job_url: Callable[[str], str]):
    ops: dict[str, dict[str, Any]] = {}
    for row in events:
        payload = row.payload if isinstance(row.payload, dict) else {}
        cid = str(payload.get("command_id"))
        if row.type == "OperationScheduled":
            job_id = payload.get("execution_key") or ""
            job = jobs.get(job_id, {})
            ops[cid] = {
                "command_id": cid,
                "name": payload.get("name"),
                "version": payload.get("version"),
                "job_id": job_id,
                "job_state": job.get("state"),
                "attempt": job.get("attempt"),
                "max_attempts": job.get("max_attempts"),
                "url": job_url(job_id) if job else None,
                "scheduled_seq": row.seq,
                "status": "pending",
                "detail": "",
            }
        elif cid in ops and row.type in _OUTCOME:
            status = _OUTCOME[row.type]
            if status != "resolved":
                ops[cid]["status"] = status
            else:
                ops[cid]["detail"] = f"resolved: {payload.get('decision')}"
            if payload.get("error") or payload.get("reason"):
                ops[cid]["detail"] = str(payload.get("error") or payload.get("reason"))[:500]
    return list(ops.values())


def _timers(events: list[Any]) -> list[dict[str, Any]]:
    timers: dict[str, dict[str, Any]] = {}
    for row in events:
        payload = row.payload if isinstance(row.payload, dict) else {}
        cid = str(payload.get("command_id"))
        if row.type == "TimerScheduled":
            timers[cid] = {
                "command_id": payload.get("command_id"),
                "duration_ms": payload.get("duration_ms"),
                "fire_at_ms": payload.get("fire_at_ms"),
                "fired": False,
            }
        elif row.type == "TimerFired" and cid in timers:
            timers[cid]["fired"] = True
    return list(timers.values())


def execution_snapshot(
    execution_id: str, *, reveal: bool, job_url: Callable[[str], str]
) -> dict[str, Any]:
    """Everything the execution page draws. Raises ``NotFoundError`` for an unknown id."""
    found = execution_detail(execution_id)
    if found is None:
        raise NotFoundError(f"execution {execution_id} does not exist", id=execution_id)
    header, events = found
    jobs = execution_jobs(DURABLE_PREFIX + execution_id)
    operations = _operations(events, jobs, job_url)
    return {
        "execution_id": header.id,
        "name": header.name,
        "version": header.version,
        "state": header.state,
        "failure_reason": header.failure_reason,
        "suspended_reason": header.suspended_reason,
        "task_queue": header.task_queue,
        "created_at": iso(header.created_at),
        "updated_at": iso(header.updated_at),
        "finished_at": iso(header.finished_at),
        "last_seq": header.last_seq,
        "operations": operations,
        "pending": [o["command_id"] for o in operations if o["status"] == "pending"],
        "uncertain": [o["command_id"] for o in operations if o["status"] == "uncertain"],
        "timers": _timers(events),
        "parent_id": header.parent_id,
        "children": [
            {"id": c.id, "name": c.name, "version": c.version, "state": c.state}
            for c in children_of(header.id)
        ],
        "events": [_event(e, reveal) for e in reversed(events)],
        "revealed": reveal,
    }


def execution_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """The whole snapshot when anything changed (execution pages are small), else None."""
    return None if old == new else {"type": "snapshot", "snapshot": new}

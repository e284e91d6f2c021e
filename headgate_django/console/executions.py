"""What the durable execution page shows: header, history timeline, Operations, sleeps,
what a parked execution waits for, the chain of runs, and the parent and children of a
child execution.

Operations are read off the history (``OperationScheduled`` and its facts) and joined
with their jobs, so the page can point at the Operation the execution is waiting for
and highlight the uncertain ones an operator has to decide. What a parked pass waits for
(a ``select``'s branches, or one future) is what the runtime kept on the header
(``Execution.waiting_on``): the console cannot run workflow code to find out. Inputs,
results and signal payloads inside events are user data (:mod:`headgate_django.visibility`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from headgate_django.console.groups import DURABLE_PREFIX
from headgate_django.console.snapshots import iso
from headgate_django.exceptions import NotFoundError
from headgate_django.models import Execution
from headgate_django.store.console import (
    execution_detail,
    execution_finished_runs,
    execution_jobs,
)
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
            fire_at = payload.get("fire_at_ms")
            timers[cid] = {
                "command_id": payload.get("command_id"),
                "duration_ms": payload.get("duration_ms"),
                "fire_at_ms": fire_at,
                "due_at": _instant(fire_at),
                "fired": False,
            }
        elif row.type == "TimerFired" and cid in timers:
            timers[cid]["fired"] = True
    return list(timers.values())


def _instant(ms: Any) -> str | None:
    if not isinstance(ms, int) or isinstance(ms, bool):
        return None
    return iso(datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms))


def _branch(future: str, timers: dict[str, dict[str, Any]], ops: dict[str, Any]) -> dict[str, Any]:
    """One future a parked pass waits on, described for an operator."""
    kind, _, rest = future.partition(":")
    branch: dict[str, Any] = {"id": future, "kind": kind, "label": future, "due_at": None}
    if kind == "signal":
        name, _, ordinal = rest.rpartition(":")
        branch["label"] = f"signal {name!r} (wait {ordinal})"
    elif kind == "timer" and future in timers:
        timer = timers[future]
        branch["label"] = f"sleep {(timer['duration_ms'] or 0) / 1000:g} s"
        branch["due_at"] = timer["due_at"]
    elif kind == "op" and future in ops:
        branch["label"] = f"Operation {ops[future]['name']}@{ops[future]['version']}"
    return branch


def _waiting(header: Execution, timers: list[dict[str, Any]], ops: list[dict[str, Any]]) -> Any:
    """The select (with its branches) or the future the last pass parked on, while live."""
    parked = header.waiting_on
    if header.state not in ("running", "suspended") or not isinstance(parked, dict):
        return None
    by_timer = {str(t["command_id"]): t for t in timers}
    by_op = {str(o["command_id"]): o for o in ops}
    futures = [str(f) for f in parked.get("futures") or []]
    return {
        "select": parked.get("select"),
        "branches": [_branch(f, by_timer, by_op) for f in futures],
    }


def _runs(header: Execution) -> list[dict[str, Any]]:
    """The chain of runs, oldest first; ``pk`` names a finished run's archived history."""
    runs = [
        {
            "number": r.number,
            "run_id": r.run_id,
            "pk": r.pk,
            "events": r.events,
            "started_at": iso(r.started_at),
            "finished_at": iso(r.finished_at),
            "current": False,
        }
        for r in execution_finished_runs(header.id)
    ]
    started = runs[-1]["finished_at"] if runs else iso(header.created_at)
    runs.append(
        {
            "number": header.run_number,
            "run_id": header.run_id or header.id,
            "pk": None,
            "events": header.last_seq,
            "started_at": started,
            "finished_at": iso(header.finished_at),
            "current": True,
        }
    )
    return runs


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
    timers = _timers(events)
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
        "timers": timers,
        "waiting": _waiting(header, timers, operations),
        "runs": _runs(header),
        "history_warning": header.history_warning,
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

"""Schedules declared in ``HEADGATE["SCHEDULES"]``, and syncing them into the store.

::

    HEADGATE = {"SCHEDULES": {
        "nightly-report": {"task": "reports.tasks.nightly", "spec": "0 3 * * *",
                           "kwargs": {"full": True}, "tz": "Europe/Berlin"},
        "daily-import": {"workflow": "daily-import", "spec": "@daily"},
        "hourly-audit": {"durable": {"name": "audit", "version": "1"}, "spec": "@hourly"},
    }}

Every starting ``runworkers`` syncs them: each is upserted (the same spec keeps its
phase, so restarts change nothing), and a schedule declared before but gone from the
settings is paused, not deleted, so its history stays and a mistaken edit loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from headgate_django.exceptions import ScheduleError
from headgate_django.kernel.schedule_spec import accept_spec, check_on_missed, validate_name
from headgate_django.registry import TaskDef, find_task
from headgate_django.schedules.targets import DurableTarget, Target, WorkflowTarget, encode

_TARGETS = ("task", "workflow", "durable")
_OPTIONS = ("spec", "args", "kwargs", "tz", "on_missed", "backfill_limit", "paused")


def declared() -> dict[str, dict[str, Any]]:
    from headgate_django.conf import headgate_settings

    value = headgate_settings.SCHEDULES
    if not isinstance(value, dict):
        raise ScheduleError("HEADGATE['SCHEDULES'] must be a dict of name → schedule")
    return value


def options(name: str, entry: Any, *, import_paths: bool = True) -> dict[str, Any]:
    """The keyword arguments of ``upsert`` for one declared entry; ScheduleError if bad.

    ``import_paths`` lets ``task`` be a dotted import path as well as a kind: settings are
    the project's own code, but an entry sent over the API names its task by kind alone,
    since importing the module a caller names runs that module's code in the server."""
    if not isinstance(entry, dict):
        raise ScheduleError(f"HEADGATE['SCHEDULES'][{name!r}] must be a dict")
    unknown = sorted(set(entry) - set(_TARGETS) - set(_OPTIONS))
    kinds = [key for key in _TARGETS if key in entry]
    if unknown or len(kinds) != 1 or "spec" not in entry:
        raise ScheduleError(
            f"HEADGATE['SCHEDULES'][{name!r}] needs a spec and one of task, workflow, "
            f"durable" + (f"; unknown keys: {', '.join(unknown)}" if unknown else "")
        )
    kw = {
        "spec": entry["spec"],
        "target": _target(name, kinds[0], entry, import_paths),
        "tz": entry.get("tz"),
        "on_missed": entry.get("on_missed", "skip"),
        "backfill_limit": entry.get("backfill_limit", 10),
        "paused": bool(entry.get("paused", False)),
    }
    # Everything upsert would refuse, refused before any entry is written.
    validate_name(name)
    accept_spec(kw["spec"], tz=kw["tz"])
    check_on_missed(kw["on_missed"], kw["backfill_limit"])
    encode(kw["target"])
    return kw


def _target(name: str, kind: str, entry: dict[str, Any], import_paths: bool) -> Target:
    if kind == "workflow":
        return WorkflowTarget(entry["workflow"])
    if kind == "durable":
        spec = entry["durable"]
        if not isinstance(spec, dict) or not {"name", "version"} <= set(spec):
            raise ScheduleError(f"schedule {name!r}: durable needs name and version")
        return DurableTarget(**spec)
    task = _task(name, entry["task"], import_paths)
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ScheduleError(f"schedule {name!r}: args is a list and kwargs a dict")
    problem = task.misfit(args, kwargs)
    if problem is not None:  # every tick would make an undecodable job
        raise ScheduleError(f"schedule {name!r}: {problem}")
    return task.envelope(*args, **kwargs)


def _task(name: str, path: Any, import_paths: bool) -> TaskDef:
    """A task by its registered kind or, with ``import_paths``, its dotted import path."""
    found = find_task(path) if isinstance(path, str) else None
    if found is None and import_paths and isinstance(path, str):
        try:
            candidate = import_string(path)
        except ImportError:
            candidate = None
        found = candidate if isinstance(candidate, TaskDef) else None
    if found is None:
        names = "the kind or import path" if import_paths else "the kind"
        raise ScheduleError(f"schedule {name!r}: no task has {names} {path!r}")
    return found


def sync(upsert: Callable[..., Any], *, using: str = "default") -> dict[str, list[str]]:
    """Upsert every declared schedule, all checked first; pause the undeclared ones.
    Returns the names synced and the names paused."""
    from headgate_django.store.schedules import schedule_pause_undeclared

    entries = {name: options(name, entry) for name, entry in declared().items()}
    for name, kw in entries.items():
        upsert(
            name,
            kw["spec"],
            kw["target"],
            kw["tz"],
            kw["on_missed"],
            kw["backfill_limit"],
            kw["paused"],
            True,
            using,
        )
    paused = schedule_pause_undeclared(sorted(entries), using=using)
    return {"synced": sorted(entries), "paused": paused}

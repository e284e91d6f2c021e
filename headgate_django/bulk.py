"""Operator actions over many jobs: retry, cancel, delete, promote or reschedule every job
a filter matches, guarded by the count the operator expects.

    from headgate_django import bulk
    result = bulk.perform("retry", expected_count=42, queue="emails", states=["archived"])

The count guard is what makes a filter safe to act on: the jobs are locked, counted and
changed in one transaction, so when the count is not ``expected_count`` nothing changes
(``CountMismatchError`` with the actual count) and when it is, the action applies to
exactly those jobs. Up to ``HEADGATE["BULK_SYNC_LIMIT"]`` jobs it runs there and then;
above it, the same transaction enqueues an internal job (``headgate:bulk-action``, on
``HEADGATE["BULK_QUEUE"]``) holding the locked ids, which works through them in chunks
with ``ctx.set_progress`` (the console's job page shows it live) and resumes from its
cursor after a crash. More than ``HEADGATE["BULK_MAX_JOBS"]`` is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.envelope import Envelope, check_not_too_long, encode_call, internal
from headgate_django.exceptions import BulkLimitError, DefinitionError
from headgate_django.kernel.names import BULK_KIND
from headgate_django.registry import internal_task
from headgate_django.store.bulk import ACTIONS, JobSelection, job_bulk_chunk, job_bulk_perform

__all__ = ["ACTIONS", "BulkResult", "JobSelection", "perform"]

#: Jobs one transaction of a bulk job changes.
CHUNK = 500


@dataclass(frozen=True)
class BulkResult:
    """What :func:`perform` did: ``changed`` now, or ``job_id`` of the job that will."""

    action: str
    matched: int
    changed: int | None = None  # None when it runs as a job
    job_id: str | None = None  # the internal job (its progress: done / matched)


def perform(
    action: str,
    *,
    expected_count: int,
    at: datetime | None = None,
    delay: timedelta | None = None,
    using: str = "default",
    **selection: Any,
) -> BulkResult:
    """Apply ``action`` to every job matching ``selection`` (``JobSelection``'s fields:
    queue, kind, states, enqueued_after/before, finalized_after/before, ids).

    Jobs the action cannot move (a retry of a running job) are left as they are: they
    count as matched, not as changed. ``reschedule`` takes ``at`` or ``delay``.
    """
    chosen = _selection(selection)
    _check_request(action, expected_count, at, delay)
    s = headgate_settings
    outcome = job_bulk_perform(
        action,
        chosen,
        expected_count=expected_count,
        max_jobs=s.BULK_MAX_JOBS,
        sync_limit=s.BULK_SYNC_LIMIT,
        as_job=lambda ids: _bulk_job(action, ids, at, delay),
        at=at,
        delay=delay,
        using=using,
    )
    return BulkResult(action, *outcome)


def _selection(given: dict[str, Any]) -> JobSelection:
    unknown = sorted(set(given) - set(JobSelection.__dataclass_fields__))
    if unknown:
        raise DefinitionError(f"unknown bulk filter(s): {', '.join(unknown)}")
    for name in ("states", "ids"):
        if name in given:
            if isinstance(given[name], str):
                raise DefinitionError(f"{name} is a list, not a string")
            given = {**given, name: tuple(given[name])}
    chosen = JobSelection(**given)
    chosen.check()
    return chosen


def _check_request(
    action: str, expected_count: int, at: datetime | None, delay: timedelta | None
) -> None:
    if action not in ACTIONS:
        raise DefinitionError(f"unknown bulk action {action!r}: one of {', '.join(ACTIONS)}")
    if type(expected_count) is not int or expected_count < 0:
        raise DefinitionError("expected_count is a whole number from 0")
    if action == "reschedule":
        if (at is None) == (delay is None):
            raise DefinitionError("reschedule needs exactly one of at= or delay=")
        if at is not None and at.tzinfo is None:
            raise DefinitionError("reschedule: at must be timezone-aware")
        if delay is not None and delay < timedelta(0):
            raise DefinitionError("reschedule: delay must not be negative")
        check_not_too_long("reschedule: delay", delay)
    elif at is not None or delay is not None:
        raise DefinitionError(f"{action} takes no at= or delay=")


def _bulk_job(
    action: str, ids: Sequence[str], at: datetime | None, delay: timedelta | None
) -> Envelope:
    """The internal job that works through ``ids``; ``BulkLimitError`` when the ids do
    not fit in one job's payload (``HEADGATE["MAX_PAYLOAD_BYTES"]``), which a raised
    ``BULK_MAX_JOBS`` or long job ids can reach: said as the bulk limit it is, with how
    many of these ids would fit, rather than as an oversize payload the caller never sent."""
    when = {
        "at": at.isoformat() if at else None,
        "delay_ms": None if delay is None else int(delay.total_seconds() * 1000),
    }
    payload = encode_call((), {"action": action, "ids": list(ids), **when})
    budget = headgate_settings.MAX_PAYLOAD_BYTES
    if len(payload) > budget:
        fits = len(ids) * budget // len(payload)
        raise BulkLimitError(
            f"the {len(ids)} matching jobs' ids take {len(payload)} bytes, more than one "
            f"bulk job holds (HEADGATE['MAX_PAYLOAD_BYTES'] = {budget}); about {fits} of "
            "them fit: narrow the filter",
            limit=fits,
        )
    return internal(Envelope(kind=BULK_KIND, queue=headgate_settings.BULK_QUEUE, payload=payload))


@internal_task(kind=BULK_KIND, queue="headgate-bulk")
def run_bulk_action(
    ctx: JobContext,
    action: str,
    ids: list[str],
    at: str | None = None,
    delay_ms: int | None = None,
) -> dict[str, int]:
    """Work through ``ids`` a chunk per transaction; the cursor says where to resume.

    A crash between a chunk's commit and its cursor write applies that chunk again, which
    changes nothing more: each action only moves jobs still in a state it moves."""
    when = datetime.fromisoformat(at) if at else None
    delay = None if delay_ms is None else timedelta(milliseconds=delay_ms)
    total = len(ids)

    def walk(cursor: bytes | None) -> dict[str, int]:
        done, changed = json.loads(cursor) if cursor else (0, 0)
        while done < total:
            chunk = ids[done : done + CHUNK]
            changed += job_bulk_chunk(action, chunk, at=when, delay=delay, using=ctx.using)
            done += len(chunk)
            ctx.set_cursor(json.dumps([done, changed]).encode())
            ctx.set_progress(done, max(total, 1), f"{action}: {changed} changed")
        return {"matched": total, "changed": changed}

    return ctx.step_cursor("apply", walk)

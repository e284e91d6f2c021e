"""Store verbs of durable updates: accept one (exactly once per update id), and read it back.

An update is accepted by appending ``UpdateAccepted`` with ``fact_key = "update:<id>"``:
the unique ``(execution, fact_key)`` constraint makes an update id count once per
execution, and the lookup by it is an index seek. The append is a compare-and-set on the
seq the caller's validator replayed up to, so an update is only ever accepted against the
state its validator judged; the header lock is held only for that short transaction,
never while workflow code runs. The handler's outcome (``UpdateCompleted``) is appended by the replay pass
that runs it (see :mod:`headgate_django.store.durable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from headgate_django.exceptions import (
    InvalidTransitionError,
    NotFoundError,
    RevisionConflictError,
)
from headgate_django.kernel.replay_events import UPDATE_ACCEPTED, UPDATE_COMPLETED, Event
from headgate_django.models import HistoryEvent, RunHistoryEvent
from headgate_django.store import durable_jobs as jobs
from headgate_django.store import vendor as v
from headgate_django.store.durable_history import (
    NewEvent,
    append,
    history_load,
    lock_execution,
    to_ms,
)

__all__ = ["UpdateRecord", "update_accept", "update_read"]


@dataclass(frozen=True)
class UpdateRecord:
    """One accepted update: what was asked, and its outcome once a pass ran it."""

    update_id: str
    name: str
    payload: Any
    accepted_seq: int
    #: The ``UpdateCompleted`` event, or None while the workflow has not handled it.
    completed: Event | None


def fact_key(update_id: str) -> str:
    return f"update:{update_id}"


def update_accept(
    execution_id: str,
    *,
    expected_seq: int,
    expected_run: str,
    update_id: str,
    name: str,
    payload: Any,
    using: str = "default",
) -> UpdateRecord | None:
    """Append ``UpdateAccepted`` right after seq ``expected_seq`` and wake the workflow task;
    None when it was appended.

    A known ``update_id`` returns its record instead (whatever the execution's state now).
    Raises :class:`NotFoundError` for a missing execution, :class:`InvalidTransitionError`
    unless it is running, and :class:`RevisionConflictError` when history moved past
    ``expected_seq`` of run ``expected_run`` (validate again against the new history: a
    run that continued as new starts again from seq 1, so the seq alone is not enough).
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        locked = lock_execution(cursor, conn, execution_id)
        if locked is None:
            raise NotFoundError(f"execution {execution_id} does not exist", id=execution_id)
        known = update_read(execution_id, update_id, using=using)
        if known is not None:
            return known
        if locked.state != "running":
            raise InvalidTransitionError(
                f"execution {execution_id} is {locked.state}; only a running execution "
                "takes updates",
                state=locked.state,
            )
        if (locked.run_id, locked.last_seq) != (expected_run, expected_seq):
            raise RevisionConflictError(
                f"the history of execution {execution_id} moved past seq {expected_seq}",
                execution_id=execution_id,
            )
        event = {"update_id": update_id, "name": name, "payload": payload}
        accepted = NewEvent(UPDATE_ACCEPTED, event, fact_key=fact_key(update_id))
        append(cursor, conn, execution_id, expected_seq, [accepted])
        jobs.task_wake(cursor, conn, execution_id, locked.task_queue)
    return None


def update_read(
    execution_id: str, update_id: str, *, using: str = "default"
) -> UpdateRecord | None:
    """The update ``update_id`` of ``execution_id``, or None when it was never accepted
    (by any of its runs: an update id counts once per execution, not once per run)."""
    row = (
        HistoryEvent.objects.using(using)
        .filter(execution_id=execution_id, fact_key=fact_key(update_id), type=UPDATE_ACCEPTED)
        .values_list("seq", "payload")
        .first()
    )
    if row is None:
        return _archived_update(execution_id, update_id, using)
    seq, payload = row
    done = history_load(execution_id, after_seq=seq, types=(UPDATE_COMPLETED,), using=using)
    completed = next((e for e in done if e.payload.get("update_id") == update_id), None)
    return UpdateRecord(update_id, payload["name"], payload.get("payload"), seq, completed)


def _archived_update(execution_id: str, update_id: str, using: str) -> UpdateRecord | None:
    """Update ``update_id`` as a finished run recorded it. A run that continues as new
    records an outcome for every update it accepted, so its archive holds both events."""
    runs = RunHistoryEvent.objects.using(using).filter(run__execution_id=execution_id)
    mine = runs.filter(payload__update_id=update_id)
    row = mine.filter(type=UPDATE_ACCEPTED).values_list("run_id", "seq", "payload").first()
    if row is None:
        return None
    run, seq, payload = row
    done = (
        mine.filter(run_id=run, type=UPDATE_COMPLETED, seq__gt=seq)
        .values_list("seq", "payload", "at")
        .first()
    )
    completed = None if done is None else Event(done[0], UPDATE_COMPLETED, done[1], to_ms(done[2]))
    return UpdateRecord(update_id, payload["name"], payload.get("payload"), seq, completed)

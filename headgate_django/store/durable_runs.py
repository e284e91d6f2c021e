"""Runs of a durable execution: continue-as-new, and reading the chain of runs.

An execution's history is the history of its *current* run: ``headgate_durable_history``
always starts at seq 1 with that run's ``WorkflowStarted``, so every reader and writer of
history (replay, facts, signals, timers) works unchanged whatever the run. Continuing as new
archives the run that ended — a ``headgate_durable_run`` row and its events copied to
``headgate_durable_run_history`` — and starts the next run in the same transaction as the
pass that decided it, so no one ever sees an execution between two runs.

A run is named by its run id: the execution's own id for the first run (so executions
started before runs existed keep their Operation keys), a fresh ULID for each later run. An
Operation's job id is ``<run id>:<command id>``, so every run has its own Operation jobs and
an Operation of an ended run can never settle a command of the run that replaced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.replay_events import OP_PREFIX, WORKFLOW_STARTED, Event
from headgate_django.models import Execution, ExecutionRun, HistoryEvent, RunHistoryEvent
from headgate_django.store import vendor as v
from headgate_django.store.durable_history import (
    EXEC_TABLE,
    HISTORY_TABLE,
    NewEvent,
    insert_events,
    payload_bytes,
    prep,
    to_ms,
)

RUN_TABLE = "headgate_durable_run"
RUN_HISTORY_TABLE = "headgate_durable_run_history"
_MS = timedelta(milliseconds=1)

__all__ = [
    "NextRun",
    "RunRecord",
    "command_of",
    "execution_runs",
    "run_history_load",
    "run_of",
    "run_start_next",
    "runs_prune",
]


@dataclass(frozen=True)
class NextRun:
    """The run a pass starts when its code continued as new.

    ``ended_*`` describe the run that ends (read by the pass); ``carried`` are the
    ``SignalReceived`` events it had not consumed, delivered again to the new run; ``at`` is
    the store instant of the pass."""

    at: datetime
    run_id: str
    input: Any
    seed: str
    carried: Sequence[NewEvent]
    ended_run_id: str
    ended_number: int
    ended_input: Any
    ended_bytes: int


@dataclass(frozen=True)
class RunRecord:
    """One run in an execution's chain; ``finished_at`` is None for the current run."""

    number: int
    run_id: str
    events: int
    started_at: datetime | None
    finished_at: datetime | None


def run_of(job_id: str) -> str:
    """The run id an Operation job id (``<run id>:op:<n>``) belongs to."""
    return job_id[: job_id.rindex(f":{OP_PREFIX}")]


def is_operation_of(job_id: str, run_id: str) -> bool:
    """Whether ``job_id`` is an Operation job of run ``run_id``. Exactly, not by prefix:
    ids may contain ``:``, so ``<run>:`` also begins the Operations of a run ``<run>:x``."""
    return f":{OP_PREFIX}" in job_id and run_of(job_id) == run_id


def command_of(job_id: str) -> str:
    """The command id (``op:<n>``) of an Operation job id."""
    return job_id[job_id.rindex(f":{OP_PREFIX}") + 1 :]


def run_start_next(
    cursor: Any, conn: Any, *, execution_id: str, last_seq: int, next_run: NextRun
) -> None:
    """Archive the current run (its events up to ``last_seq``, the pass having just
    appended its ``WorkflowContinuedAsNew``) and start ``next_run``: a fresh history with its
    ``WorkflowStarted`` and the carried signals, and the header pointed at it. Call in the
    pass's transaction, with the header locked."""
    q = conn.ops.quote_name
    at = next_run.at
    first = HistoryEvent.objects.using(conn.alias).filter(execution_id=execution_id, seq=1)
    run = ExecutionRun.objects.using(conn.alias).create(
        execution_id=execution_id,
        number=next_run.ended_number,
        run_id=next_run.ended_run_id,
        input=next_run.ended_input,
        events=last_seq,
        history_bytes=next_run.ended_bytes,
        started_at=first.values_list("at", flat=True).get(),
        finished_at=at,
    )
    columns = f"seq, {q('type')}, payload, {q('at')}"
    cursor.execute(
        f"INSERT INTO {RUN_HISTORY_TABLE} (run_id, {columns}) SELECT %s, {columns} "
        f"FROM {HISTORY_TABLE} WHERE execution_id = %s",
        [run.pk, execution_id],
    )
    cursor.execute(f"DELETE FROM {HISTORY_TABLE} WHERE execution_id = %s", [execution_id])
    started = NewEvent(
        WORKFLOW_STARTED,
        {
            "input": next_run.input,
            "seed": next_run.seed,
            "continued_from": next_run.ended_run_id,
        },
        at=at,
    )
    events = [started, *(NewEvent(e.type, e.payload, at=at) for e in next_run.carried)]
    insert_events(cursor, conn, execution_id, 1, events)
    cursor.execute(
        f"UPDATE {EXEC_TABLE} SET run_id = %s, run_number = %s, {q('input')} = %s, "
        "last_seq = %s, history_bytes = %s, history_warning = '', next_timer_at = NULL, "
        "waiting_on = NULL "
        "WHERE id = %s",
        [
            next_run.run_id,
            next_run.ended_number + 1,
            prep(Execution, "input", next_run.input, conn),
            len(events),
            payload_bytes(events),
            execution_id,
        ],
    )


def execution_runs(row: Execution, *, using: str = "default") -> list[RunRecord]:
    """The chain of runs of execution ``row``, oldest first, the current one last."""
    runs = [
        RunRecord(r.number, r.run_id, r.events, r.started_at, r.finished_at)
        for r in ExecutionRun.objects.using(using).filter(execution_id=row.id).order_by("number")
    ]
    # The current run began when the run before it ended; with every earlier run pruned
    # (retention), that instant is no longer known.
    started = runs[-1].finished_at if runs else row.created_at if row.run_number == 1 else None
    current = RunRecord(row.run_number, row.run_id or row.id, row.last_seq, started, None)
    return [*runs, current]


def run_history_load(
    execution_id: str, run_id: str, *, using: str = "default"
) -> tuple[Any, list[Event]]:
    """The input and the archived events of a finished run of the execution.

    Raises :class:`NotFoundError` when the execution has no finished run ``run_id``.
    """
    run = ExecutionRun.objects.using(using).filter(execution_id=execution_id, run_id=run_id)
    found = run.values_list("pk", "input").first()
    if found is None:
        raise NotFoundError(
            f"execution {execution_id} has no finished run {run_id}", id=execution_id
        )
    pk, input = found
    rows = RunHistoryEvent.objects.using(using).filter(run_id=pk).order_by("seq")
    events = [
        Event(seq, kind, payload, to_ms(at))
        for seq, kind, payload, at in rows.values_list("seq", "type", "payload", "at")
    ]
    return input, events


def runs_prune(*, older_than: timedelta, limit: int, using: str = "default") -> int:
    """Delete, with their archived histories, up to ``limit`` finished runs that ended more
    than ``older_than`` ago, whatever their execution's state; return how many.

    Retention counts from each run's own end, as it does for an execution's: a workflow
    that continues as new for ever (the reason to continue as new) would otherwise keep
    every run it ever ended, and its execution, never finished, is never vacuumed. Read
    oldest first off the ``finished_at`` index, so a batch reads about its own rows."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {RUN_TABLE} WHERE finished_at <= {v.cutoff(conn, offset=True)} "
            f"ORDER BY finished_at LIMIT %s{v.skip_locked(conn)}",
            [-(older_than // _MS), limit],
        )
        ids = [row[0] for row in cursor.fetchall()]
        if ids:
            marks = v.placeholders(len(ids))
            cursor.execute(f"DELETE FROM {RUN_HISTORY_TABLE} WHERE run_id IN ({marks})", ids)
            cursor.execute(f"DELETE FROM {RUN_TABLE} WHERE id IN ({marks})", ids)
    return len(ids)


def runs_vacuum(cursor: Any, conn: Any, execution_ids: Sequence[str]) -> None:
    """Delete the archived runs of executions about to be deleted (retention)."""
    marks = v.placeholders(len(execution_ids))
    cursor.execute(
        f"DELETE FROM {RUN_HISTORY_TABLE} WHERE run_id IN (SELECT id FROM {RUN_TABLE} "
        f"WHERE execution_id IN ({marks}))",
        list(execution_ids),
    )
    cursor.execute(f"DELETE FROM {RUN_TABLE} WHERE execution_id IN ({marks})", list(execution_ids))

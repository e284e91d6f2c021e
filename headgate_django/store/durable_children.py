"""Child executions in the store: start them with the parent's pass, tell the parent how
they ended, and find them.

A child is inserted in the transaction that records its ``ChildStarted`` in the parent's
history, so one never exists without the other, and a pass retried after a crash finds
the child it already started (the child id is derived from the parent's run and command).
When the child ends, the transaction that ends it appends ``ChildCompleted`` or
``ChildFailed`` to the parent and wakes it — if the parent's current run is the one that
started it: a child of a run that continued as new reports to nobody (command ids restart
with every run, so its ``child:N`` would name another child of the new run). Lock order: the child's header, then the
parent's (a parent's pass only inserts new children, it never locks a live one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from django.db.models import CharField, Exists, OuterRef, Q, Value
from django.db.models.functions import Concat

from headgate_django.kernel.replay_events import (
    CANCEL_REQUESTED,
    CHILD_COMPLETED,
    CHILD_FAILED,
    CHILD_STARTED,
    WORKFLOW_STARTED,
    StartChild,
)
from headgate_django.models import DURABLE_LIVE, Execution, HistoryEvent, SignalInbox
from headgate_django.store import durable_jobs as jobs
from headgate_django.store import vendor as v
from headgate_django.store.durable_history import (
    EXEC_TABLE,
    NewEvent,
    NewHeader,
    append_fact,
    insert_events,
    insert_header,
    lock_execution,
    payload_bytes,
)
from headgate_django.store.insert import job_insert_many
from headgate_django.store.tracing import job_trace_stamp

#: ``ChildFailed.state`` of a child that could not start (its id belongs to another execution).
NOT_STARTED = "not_started"
#: The prefix of a close request's ``message_id`` (see :func:`close_request_id`).
_CLOSE_REQUEST = "parent-closed:"


@dataclass(frozen=True)
class ChildStart:
    """A child a pass starts: its command, the seed of its replay and its task queue."""

    command: StartChild
    seed: str
    task_queue: str


def fact_key(child_id: str) -> str:
    """The parent's fact key for the outcome of child ``child_id``: one outcome per child."""
    return f"child:{child_id}"


def children_insert(
    cursor: Any, conn: Any, parent_id: str, children: Sequence[ChildStart], *, through_seq: int
) -> list[NewEvent]:
    """Insert the children a pass of ``parent_id`` starts, with their ``WorkflowStarted``
    and first task. A child already started by this very command is left as it is; one
    whose id another execution holds is not started, and the ``ChildFailed`` facts returned
    say so (the caller appends them after the pass's own events, which begin after
    ``through_seq``)."""
    if not children:
        return []
    ids = [c.command.child_id for c in children]
    cursor.execute(
        f"SELECT id, parent_id, parent_command_id FROM {EXEC_TABLE} "
        f"WHERE id IN ({v.placeholders(len(ids))})",
        ids,
    )
    taken = {row[0]: (row[1], row[2]) for row in cursor.fetchall()}
    # A key an earlier run of this parent used is taken like any other: command ids restart
    # with every run, so the owner's command id alone does not tell the runs apart.
    earlier = set(taken) - started_in_current_run(conn, parent_id, through_seq=through_seq)
    refused: list[NewEvent] = []
    tasks = []
    for child in children:
        command = child.command
        owner = taken.get(command.child_id)
        if owner == (parent_id, command.command_id) and command.child_id not in earlier:
            continue  # started by this very command: a retried pass
        if owner is not None:
            reason = f"workflow id {command.child_id} is already in use by another execution"
            if owner[0] == parent_id and command.child_id in earlier:
                reason = f"workflow id {command.child_id} is in use by an earlier run"
            elif owner[0] == parent_id:
                reason = f"workflow id {command.child_id} is in use by {owner[1]} of this run"
            # No fact key: the key belongs to the outcome of the child that holds the id.
            refused.append(_failed(command.command_id, command.child_id, NOT_STARTED, reason))
            continue
        taken[command.child_id] = (parent_id, command.command_id)  # two starts, one key
        header = NewHeader(
            command.child_id,
            command.name,
            command.version,
            command.input,
            child.task_queue,
            parent_id=parent_id,
            parent_command_id=command.command_id,
            parent_close_policy=command.parent_close_policy,
        )
        started = NewEvent(WORKFLOW_STARTED, {"input": command.input, "seed": child.seed})
        insert_header(cursor, conn, header, history_bytes=payload_bytes([started]))
        insert_events(cursor, conn, command.child_id, 1, [started])
        tasks.append(jobs.task_envelope(command.child_id, child.task_queue))
    if tasks:
        # A child's attempts nest into the trace of the parent's pass that started it.
        job_trace_stamp(job_insert_many(tasks, using=conn.alias), using=conn.alias)
    return refused


def child_ended(
    cursor: Any, conn: Any, child_id: str, *, state: str, result: Any = None, reason: str = ""
) -> None:
    """Tell the parent of ``child_id`` (if it has one, and it is live) that the child ended
    in ``state``, and wake it. Call in the transaction that ends the child, which holds the
    child's header lock."""
    cursor.execute(
        f"SELECT parent_id, parent_command_id FROM {EXEC_TABLE} WHERE id = %s", [child_id]
    )
    row = cursor.fetchone()
    if row is None or row[0] is None:
        return
    parent_id, command_id = row
    locked = lock_execution(cursor, conn, parent_id)
    if locked is None or locked.state not in DURABLE_LIVE:
        return
    if child_id not in started_in_current_run(conn, parent_id):
        return  # started by a run that continued as new: that run has nobody to tell
    if state == "succeeded":
        payload = {"command_id": command_id, "child_id": child_id, "result": result}
        fact = NewEvent(CHILD_COMPLETED, payload, fact_key=fact_key(child_id))
    else:
        fact = replace(_failed(command_id, child_id, state, reason), fact_key=fact_key(child_id))
    append_fact(cursor, conn, parent_id, locked, [fact])
    if locked.state == "running":
        jobs.task_wake(cursor, conn, parent_id, locked.task_queue)


def started_in_current_run(
    conn: Any, parent_id: str, *, through_seq: int | None = None
) -> set[str]:
    """The ids of the children the current run of ``parent_id`` started (its history's
    ``ChildStarted`` events up to ``through_seq`` when given; the events of earlier runs
    are archived elsewhere)."""
    qs = HistoryEvent.objects.using(conn.alias).filter(execution_id=parent_id, type=CHILD_STARTED)
    if through_seq is not None:
        qs = qs.filter(seq__lte=through_seq)
    return {payload["child_id"] for payload in qs.values_list("payload", flat=True)}


def _failed(command_id: str, child_id: str, state: str, reason: str) -> NewEvent:
    payload = {"command_id": command_id, "child_id": child_id, "state": state, "reason": reason}
    return NewEvent(CHILD_FAILED, payload)


def children_of(parent_id: str, *, using: str = "default") -> list[Execution]:
    """The children ``parent_id`` started, oldest first."""
    qs = Execution.objects.using(using).filter(parent_id=parent_id)
    return list(qs.order_by("created_at", "id"))


def children_to_close(parent_id: str, *, using: str = "default") -> list[tuple[str, str]]:
    """``(child id, policy)`` of the live children of ``parent_id`` whose close policy asks
    for something when the parent finishes (every policy but ``abandon``)."""
    qs = Execution.objects.using(using).filter(parent_id=parent_id, state__in=DURABLE_LIVE)
    qs = qs.exclude(parent_close_policy="abandon").order_by("created_at", "id")
    return list(qs.values_list("id", "parent_close_policy"))


def children_of_ended_runs(parent_id: str, *, using: str = "default") -> list[tuple[str, str]]:
    """``(child id, policy)`` of the live children of ``parent_id`` that an earlier run
    started (one that continued as new) and whose close policy asks for something."""
    live = children_to_close(parent_id, using=using)  # first: see the module docstring
    if not live:
        return []
    # Read after the children: a child is inserted with its ChildStarted, so one listed
    # above and missing here was started by a run that has ended since.
    current = started_in_current_run(v.connection_for(using), parent_id)
    return [(child_id, policy) for child_id, policy in live if child_id not in current]


def close_request_id(parent_id: str) -> str:
    """The ``message_id`` of the :data:`CANCEL_REQUESTED` signal the close of
    ``parent_id`` delivers to a ``request_cancel`` child: one per parent, so a close run
    again (by the task's retry, or by the reconcile duty) asks each child once."""
    return f"{_CLOSE_REQUEST}{parent_id}"


def orphans_to_close(
    *, after: str = "", limit: int, using: str = "default"
) -> tuple[list[str], str]:
    """Up to ``limit`` finished parents, by id after ``after``, that still have children to
    close (the close that follows a parent's end was cut short): for the reconcile duty;
    and where the next call starts ("" once it wrapped).

    A live ``terminate`` child is one to close, and so is a live ``request_cancel`` child
    that was not asked yet (its request is a signal with :func:`close_request_id`, which it
    keeps after it): once asked it ends when its code decides, and asking again would
    deliver nothing. Read from the live children, few beside the finished executions.
    """
    finished = Execution.objects.using(using).filter(state__in=jobs.TERMINAL)
    asked = SignalInbox.objects.using(using).filter(
        workflow_id=OuterRef("id"),
        name=CANCEL_REQUESTED,
        message_id=Concat(Value(_CLOSE_REQUEST), OuterRef("parent_id"), output_field=CharField()),
    )
    qs = (
        Execution.objects.using(using)
        .filter(state__in=DURABLE_LIVE, parent_id__gt=after, parent_id__in=finished.values("id"))
        .exclude(parent_close_policy="abandon")
        .exclude(Q(parent_close_policy="request_cancel") & Exists(asked))
    )
    parents = qs.order_by("parent_id").values_list("parent_id", flat=True).distinct()
    found = cast(list[str], list(parents[:limit]))  # parent_id > after: never NULL
    return found, found[-1] if len(found) == limit else ""

"""Child executions, the runtime's side: vet a start, and close children with their parent.

A child start is vetted where the workflow code calls ``ctx.start_child`` (the replay
engine calls :func:`check_child`), so an unknown workflow or an input the store cannot
keep raises in the parent's code and nothing is started. When a parent finishes, each
live child gets its ``parent_close_policy`` (:func:`close_children`), and so does each
live child of a run that continues as new (parent state :data:`CONTINUED`): ``terminate``
cancels it (and, in turn, its own children), ``request_cancel`` delivers the
:data:`CANCEL_REQUESTED` signal once, ``abandon`` leaves it alone. That runs after the
transaction that ended the parent; the reconcile duty finishes it after a crash.
"""

from __future__ import annotations

import contextlib
import logging

from headgate_django.durable.registry import check_execution_id, require_workflow
from headgate_django.envelope import check_payload
from headgate_django.exceptions import InvalidTransitionError, NotFoundError, exception_reason
from headgate_django.kernel.replay import MAX_EXECUTION_ID
from headgate_django.kernel.replay_events import CANCEL_REQUESTED, StartChild
from headgate_django.store import durable as store
from headgate_django.store import durable_children
from headgate_django.store.operator import job_cancel_many

log = logging.getLogger("headgate_django.durable")

#: The parent state the close policies see when a run ends by continue-as-new: the end of a
#: run closes its children as the end of the execution would.
CONTINUED = "continued_as_new"


def check_child(command: StartChild) -> None:
    """Refuse a child start this process cannot make: an unregistered workflow, an input
    that is not JSON or is over ``HEADGATE['MAX_PAYLOAD_BYTES']``, a malformed key."""
    require_workflow(command.name, command.version)
    check_payload(command.input, f"input of child {command.command_id} ({command.name})")
    check_execution_id("child workflow id", command.child_id, MAX_EXECUTION_ID)


def cancel_execution(execution_id: str, reason: str, *, using: str = "default") -> None:
    """Cancel an execution, its live jobs, then its children as their policies say."""
    live = store.execution_cancel(execution_id, reason=reason, using=using)
    job_cancel_many(live, using=using)
    close_children(execution_id, "cancelled", using=using)


def close_children(parent_id: str, parent_state: str, *, using: str = "default") -> None:
    """Apply each live child's close policy now that ``parent_id`` is ``parent_state``.

    Each child is closed in its own transaction (its header, then the parent's, as every
    child writer locks them), and closing one that ended meanwhile is not an error. A
    child that cannot be closed holds up none of the others (see :func:`_close`).
    """
    children = durable_children.children_to_close(parent_id, using=using)
    _close(parent_id, parent_state, children, using=using)


def close_children_of_ended_runs(parent_id: str, *, using: str = "default") -> None:
    """Apply the close policy of each live child that an earlier run of ``parent_id``
    started: the close that follows a continue-as-new was cut short (the worker died, or
    the close failed) and the task runs again."""
    children = durable_children.children_of_ended_runs(parent_id, using=using)
    _close(parent_id, CONTINUED, children, using=using)


def _close(
    parent_id: str, parent_state: str, children: list[tuple[str, str]], *, using: str = "default"
) -> None:
    """Close each child on its own: one the database refuses to change is logged and must
    not keep the children after it from their close. The first failure is raised once
    every child was tried, so the caller retries the close (the workflow task's retry, the
    reconcile duty's next run), which finds only the children still live."""
    failed: list[Exception] = []
    for child_id, policy in children:
        try:
            _close_one(parent_id, parent_state, child_id, policy, using=using)
        except Exception as exc:
            log.error(
                "execution %s: could not close its child %s (%s), to be tried again: %s",
                parent_id,
                child_id,
                policy,
                exception_reason(exc),
                extra={"execution_id": parent_id, "child_id": child_id},
            )
            failed.append(exc)
    if failed:
        raise failed[0]


def _close_one(
    parent_id: str, parent_state: str, child_id: str, policy: str, *, using: str
) -> None:
    if policy == "request_cancel":
        payload = {"parent_id": parent_id, "parent_state": parent_state}
        with contextlib.suppress(NotFoundError):
            store.signal_deliver(
                child_id,
                name=CANCEL_REQUESTED,
                payload=payload,
                message_id=durable_children.close_request_id(parent_id),
                using=using,
            )
        return
    reason = f"terminated: its parent {parent_id} is {parent_state}"
    with contextlib.suppress(InvalidTransitionError, NotFoundError):
        cancel_execution(child_id, reason, using=using)
        log.info("execution %s %s", child_id, reason, extra={"execution_id": child_id})


def close_orphans(*, after: str = "", limit: int, using: str = "default") -> tuple[list[str], str]:
    """Close the children of up to ``limit`` finished parents (by id, after ``after``) whose
    close was cut short; return the parents closed and where the next call starts.

    A parent whose close fails (a child row the database refuses to change) is logged and
    left for a later call; the others are still closed. A call starts after the slice the
    last one read, not at the first parents again, so failing parents that fill a slice
    keep neither that slice's other parents nor the parents after it from their close.
    """
    parents, following = durable_children.orphans_to_close(after=after, limit=limit, using=using)
    closed = []
    for parent_id in parents:
        row = store.execution_get(parent_id, using=using)
        try:
            close_children(parent_id, row.state if row else "gone", using=using)
        except Exception as exc:
            log.exception(
                "closing the children of finished execution %s failed: %s",
                parent_id,
                exc,
                extra={"execution_id": parent_id},
            )
            continue
        closed.append(parent_id)
    return closed, following

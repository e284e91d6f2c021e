"""Updates: a signal that is validated first and answers its caller with a result.

:func:`send` validates everything, runs the update's validator on a read-only replay of
the history as committed (:mod:`.queries`) and then records ``UpdateAccepted`` only if
history has not moved since that replay: a rejected update, or one that loses that race
and is rejected on its second look, writes nothing. The workflow task is woken, and the
pass that replays with the update runs its handler where the workflow code waits and
records ``UpdateCompleted`` (the ordering rule is in
:mod:`headgate_django.kernel.replay_updates`). The update id makes it exactly-once: a
known id returns the update already recorded, and never runs anything again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from headgate_django.durable.queries import (
    MAX_HANDLER_NAME,
    Snapshot,
    snapshot,
    unknown,
)
from headgate_django.durable.registry import check_name
from headgate_django.envelope import canonical_json, check_payload, new_id
from headgate_django.exceptions import (
    IdConflictError,
    InvalidTransitionError,
    NotFoundError,
    RevisionConflictError,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
)
from headgate_django.kernel.replay_queries import Raised
from headgate_django.store.durable import execution_get
from headgate_django.store.durable_jobs import TERMINAL
from headgate_django.store.durable_updates import UpdateRecord, update_accept, update_read

MAX_UPDATE_ID = 200
#: How often a waiting caller reads the update (seconds).
POLL_INTERVAL = 0.05
#: Validations in a row that may lose the race against a busy execution's history.
MAX_RACES = 20


@dataclass(frozen=True)
class UpdateView:
    """One update as its caller sees it.

    ``state`` is ``accepted`` (recorded, not handled yet), ``succeeded`` (``result`` is the
    handler's return value) or ``failed`` (``error`` says why: the handler raised, or the
    workflow ended before handling it). ``deduplicated`` is True when the update id was
    already known, so nothing new was recorded.
    """

    workflow_id: str
    update_id: str
    name: str
    state: str
    result: Any = None
    error: str | None = None
    deduplicated: bool = False

    @classmethod
    def of(cls, workflow_id: str, record: UpdateRecord, *, deduplicated: bool) -> UpdateView:
        done = record.completed
        if done is None:
            state, result, error = "accepted", None, None
        elif "error" in done.payload:
            state, result, error = "failed", None, str(done.payload["error"])
        else:
            state, result, error = "succeeded", done.payload.get("result"), None
        return cls(workflow_id, record.update_id, record.name, state, result, error, deduplicated)


def send(
    workflow_id: str,
    name: str,
    payload: Any,
    *,
    update_id: str | None = None,
    using: str = "default",
) -> UpdateView:
    """Validate and record update ``name`` of ``workflow_id``; see the module docstring."""
    check_name("update name", name, MAX_HANDLER_NAME)
    update_id = new_id() if update_id is None else update_id
    check_name("update id", update_id, MAX_UPDATE_ID)
    check_payload(payload, "update's payload")
    for _ in range(MAX_RACES):
        known = update_read(workflow_id, update_id, using=using)  # needs no code here
        if known is None:
            snap = snapshot(workflow_id, using=using)
            # Again after the snapshot: an update its validator could see, this sees too,
            # so a racing sender of the same id is never judged against its own twin.
            known = update_read(workflow_id, update_id, using=using)
        if known is not None:
            return _repeated(workflow_id, known, name, payload)
        _admit(snap, name, payload)
        try:
            known = update_accept(
                workflow_id,
                expected_seq=snap.header.last_seq,
                expected_run=snap.header.run_id,
                update_id=update_id,
                name=name,
                payload=payload,
                using=using,
            )
        except RevisionConflictError:
            continue  # history moved on: validate against it
        if known is not None:
            return _repeated(workflow_id, known, name, payload)
        return UpdateView(workflow_id, update_id, name, "accepted")
    raise RevisionConflictError(
        f"the history of execution {workflow_id} kept moving while update {name!r} was "
        "validated; try again",
        execution_id=workflow_id,
    )


def _admit(snap: Snapshot, name: str, payload: Any) -> None:
    """Refuse the update unless the execution runs, its workflow has the handler, and the
    validator passes on the state as of the snapshot."""
    if snap.header.state != "running":
        raise InvalidTransitionError(
            f"execution {snap.header.id} is {snap.header.state}; only a running execution "
            "takes updates",
            state=snap.header.state,
        )
    definition = snap.definition.updates.get(name)
    if definition is None:
        raise unknown("update", name, snap.definition, list(snap.definition.updates))
    if definition.validator is not None:
        verdict = snap.ask(definition.validator, [payload])
        if isinstance(verdict, Raised):
            raise UpdateRejectedError(
                f"update {name!r} was rejected: {verdict.reason}", update=name
            )


def _repeated(workflow_id: str, known: UpdateRecord, name: str, payload: Any) -> UpdateView:
    if known.name != name or canonical_json(known.payload) != canonical_json(payload):
        raise IdConflictError(
            f"update id {known.update_id} of execution {workflow_id} was already used for "
            f"update {known.name!r} with another payload",
            update_id=known.update_id,
        )
    return UpdateView.of(workflow_id, known, deduplicated=True)


def read(workflow_id: str, update_id: str, *, using: str = "default") -> UpdateView:
    """Update ``update_id`` as recorded now; :class:`NotFoundError` when it is unknown."""
    record = update_read(workflow_id, update_id, using=using)
    if record is None:
        if execution_get(workflow_id, using=using) is None:
            raise NotFoundError(f"execution {workflow_id} does not exist", id=workflow_id)
        raise NotFoundError(
            f"execution {workflow_id} has no update {update_id}", update_id=update_id
        )
    return UpdateView.of(workflow_id, record, deduplicated=False)


def wait(view: UpdateView, *, timeout: float | None, using: str = "default") -> UpdateView:
    """``view`` once its handler ran. Raises :class:`UpdateTimeoutError` when ``timeout``
    seconds pass first, :class:`UpdateFailedError` when the execution ended without it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while view.state == "accepted":
        row = execution_get(view.workflow_id, using=using)
        if row is None or row.state in TERMINAL:
            view = read(view.workflow_id, view.update_id, using=using)  # it may just have run
            if view.state == "accepted":
                raise UpdateFailedError(
                    f"execution {view.workflow_id} is {row.state if row else 'gone'}: it "
                    f"ended before handling update {view.update_id}",
                    update_id=view.update_id,
                )
            break
        if deadline is not None and time.monotonic() >= deadline:
            raise UpdateTimeoutError(
                f"update {view.update_id} was accepted but not handled within {timeout} s; "
                "it will still run: wait again with the same update_id",
                update_id=view.update_id,
            )
        time.sleep(POLL_INTERVAL)
        view = read(view.workflow_id, view.update_id, using=using)
    return view

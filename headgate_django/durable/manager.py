"""``durable.Manager``: read and operate executions outside the replay path.

Every verb checks the state it starts from and writes nothing when it does not hold
(``NotFoundError`` for a missing execution, ``InvalidTransitionError`` for a wrong state).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, overload

from django.db import connections

from headgate_django.durable import queries, updates
from headgate_django.durable.children import cancel_execution
from headgate_django.durable.updates import UpdateView
from headgate_django.envelope import check_result
from headgate_django.exceptions import (
    DefinitionError,
    NotFoundError,
    PayloadError,
    UpdateFailedError,
    WaitInTransactionError,
)
from headgate_django.kernel.replay_events import history_to_json
from headgate_django.kernel.storable import holds_unstorable
from headgate_django.models import Execution
from headgate_django.store import durable as store
from headgate_django.store import durable_children, durable_jobs, durable_runs
from headgate_django.waiting import check_timeout

DECISIONS = ("complete", "fail", "retry")
#: The longest reason a cancel or a suspend keeps (in its event and on the header).
MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class RunView:
    """One run in an execution's chain (see ``ctx.continue_as_new``); the current run has
    ``current=True`` and no ``finished_at``. ``events`` counts its history events."""

    number: int
    run_id: str
    events: int
    started_at: datetime | None
    finished_at: datetime | None
    current: bool


@dataclass(frozen=True)
class ChildView:
    """A child execution as its parent's view lists it."""

    id: str
    name: str
    version: str
    state: str
    command_id: str
    parent_close_policy: str


@dataclass(frozen=True)
class ExecutionView:
    """One execution's header as an operator sees it.

    ``run_id``/``run_number`` name the current run and ``history_length`` counts its events;
    ``history_warning`` is set once the run's history passed the size thresholds.
    ``runs`` is the chain of runs, oldest first; ``parent_id`` names the execution that
    started it as a child, ``children`` the ones it started, oldest first (``runs`` and
    ``children`` are filled by :meth:`Manager.get`; empty in list pages).
    """

    id: str
    name: str
    version: str
    state: str
    input: Any
    result: Any
    failure_reason: str
    suspended_reason: str
    business_idempotency_key: str | None
    task_queue: str
    meta: dict[str, Any]
    history_length: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    run_id: str
    run_number: int
    history_warning: str
    runs: tuple[RunView, ...] = ()
    parent_id: str | None = None
    children: tuple[ChildView, ...] = ()

    @classmethod
    def of(cls, row: Execution, children: list[Execution] | None = None) -> ExecutionView:
        return cls(
            id=row.id,
            name=row.name,
            version=row.version,
            state=row.state,
            input=row.input,
            result=row.result,
            failure_reason=row.failure_reason,
            suspended_reason=row.suspended_reason,
            business_idempotency_key=row.business_idempotency_key,
            task_queue=row.task_queue,
            meta=row.meta,
            history_length=row.last_seq,
            created_at=row.created_at,
            updated_at=row.updated_at,
            finished_at=row.finished_at,
            run_id=row.run_id or row.id,
            run_number=row.run_number,
            history_warning=row.history_warning,
            parent_id=row.parent_id,
            children=tuple(
                ChildView(
                    c.id, c.name, c.version, c.state, c.parent_command_id, c.parent_close_policy
                )
                for c in children or ()
            ),
        )


@dataclass(frozen=True)
class Page:
    """A page of executions; pass ``cursor`` back to get the next one (None: no more)."""

    items: list[ExecutionView] = field(default_factory=list)
    cursor: str | None = None


def _keepable(what: str, value: Any) -> None:
    """Refuse, before anything is written, a decision's ``what`` the store cannot keep:
    the rule an Operation's own result follows (``check_result``)."""
    try:
        check_result(value)
    except PayloadError:
        raise  # ResultTooLargeError: over MAX_RESULT_BYTES
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"the decision's {what} cannot be kept: {exc}") from exc


class Manager:
    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def get(self, workflow_id: str) -> ExecutionView:
        """The execution with its chain of runs and its children."""
        row = self._row(workflow_id)
        chain = durable_runs.execution_runs(row, using=self.using)
        runs = tuple(
            RunView(r.number, r.run_id, r.events, r.started_at, r.finished_at, r is chain[-1])
            for r in chain
        )
        children = durable_children.children_of(row.id, using=self.using)
        return replace(ExecutionView.of(row, children), runs=runs)

    def list(
        self, filters: dict[str, Any] | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page:
        """Executions ordered by id, filtered by state, name, version, task_queue or
        business_idempotency_key."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise DefinitionError("limit must be an integer between 1 and 1000")
        rows = store.execution_list(
            filters=filters, after=cursor, limit=limit + 1, using=self.using
        )
        more = len(rows) > limit
        items = [ExecutionView.of(r) for r in rows[:limit]]
        return Page(items, items[-1].id if more else None)

    def history(self, workflow_id: str, run_id: str | None = None) -> str:
        """The history of the current run (or of the finished run ``run_id``) as JSON, in
        the format ``durable.replay`` and ``durable_replay`` read."""
        row = self._row(workflow_id)
        current = row.run_id or row.id
        if run_id is None or run_id == current:
            input = row.input
            events = store.history_load(row.id, upto_seq=row.last_seq, using=self.using)
        else:
            input, events = durable_runs.run_history_load(row.id, run_id, using=self.using)
        return history_to_json(
            events,
            name=row.name,
            version=row.version,
            workflow_id=row.id,
            input=input,
            run_id=run_id or current,
        )

    def cancel(self, workflow_id: str, reason: str = "cancelled by an operator") -> None:
        """Cancel a running or suspended execution and its live jobs (a running Operation
        learns at its next lease renewal), then its live children as their
        ``parent_close_policy`` says. No compensation runs."""
        cancel_execution(workflow_id, _reason(reason), using=self.using)

    def suspend(self, workflow_id: str, reason: str = "suspended by an operator") -> None:
        """Stop replaying a running execution until :meth:`resume`; facts still accrue."""
        store.execution_suspend(workflow_id, reason=_reason(reason), using=self.using)

    def resume(self, workflow_id: str) -> None:
        """Run a suspended execution again now, with a fresh replay budget (the recovery
        after a replay error: deploy fixed code, then resume)."""
        store.execution_resume(workflow_id, using=self.using)

    def resolve_uncertain(
        self, job_id: str, decision: str, result: Any = None, error: str = ""
    ) -> None:
        """Decide an uncertain Operation: ``complete`` with ``result``, ``fail`` with
        ``error`` (or ``result["error"]``), or ``retry`` it. Atomic with its history and the wake-up; refused
        (``InvalidTransitionError``) unless the Operation is uncertain right now, and
        (``PayloadError``) for a ``result`` or ``error`` an Operation could not return."""
        if decision not in DECISIONS:
            raise DefinitionError(f"decision must be one of {', '.join(DECISIONS)}")
        _keepable("result", result)
        if decision == "fail" and not error and isinstance(result, dict):
            error = str(result.get("error") or "")
        if not isinstance(error, str):
            raise DefinitionError(f"error must be a string, not {type(error).__name__}")
        _keepable("error", error)
        durable_jobs.operation_resolve(
            job_id, decision=decision, result=result, error=error, using=self.using
        )

    def query(self, workflow_id: str, name: str, *args: Any) -> Any:
        """What query ``name`` of the execution's workflow returns for ``args`` (JSON), on
        its state as of the last committed event: the history is replayed here, read-only
        and without a lock, and nothing is ever recorded. A finished execution answers
        with its state at the end. Raises :class:`UnknownHandlerError` for an unknown name,
        :class:`QueryFailedError` when the handler raised (or tried to issue a command)."""
        return queries.query(workflow_id, name, args, using=self.using)

    @overload
    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = ...,
        *,
        update_id: str | None = ...,
        wait: Literal[True] = ...,
        timeout: float | None = ...,
    ) -> Any: ...

    @overload
    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = ...,
        *,
        update_id: str | None = ...,
        wait: Literal[False],
        timeout: float | None = ...,
    ) -> UpdateView: ...

    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
        wait: bool = True,
        timeout: float | None = 30.0,
    ) -> Any:
        """Send update ``name`` with ``payload`` (JSON) to a running execution.

        Its validator runs first, here: a rejection raises :class:`UpdateRejectedError`
        and records nothing. Then the update is recorded and the workflow's handler runs
        in the next replay pass. ``wait=True`` returns the handler's result (raising
        :class:`UpdateFailedError` if it raised, :class:`UpdateTimeoutError` after
        ``timeout`` seconds (from 0, or None: no limit; anything else is refused before
        the update is recorded) — the update still runs); ``wait=False`` returns an
        :class:`UpdateView` at once, to poll with :meth:`get_update`. ``update_id``
        (default: a new id) makes it exactly-once: a known id returns that update's
        outcome without running anything again.
        """
        if wait:
            check_timeout(timeout)  # before the update is recorded, not after
        if wait and connections[self.using].in_atomic_block:
            raise WaitInTransactionError(
                "cannot wait for an update inside a transaction: workers see it only after "
                "the commit (pass wait=False)"
            )
        view = updates.send(workflow_id, name, payload, update_id=update_id, using=self.using)
        if not wait:
            return view
        view = updates.wait(view, timeout=timeout, using=self.using)
        if view.state == "failed":
            raise UpdateFailedError(
                f"update {view.update_id} ({name!r}) failed: {view.error}",
                update_id=view.update_id,
            )
        return view.result

    def get_update(self, workflow_id: str, update_id: str) -> UpdateView:
        """Update ``update_id`` of the execution as recorded now (``state`` accepted,
        succeeded or failed); :class:`NotFoundError` when it was never accepted."""
        return updates.read(workflow_id, update_id, using=self.using)

    def _row(self, workflow_id: str) -> Execution:
        row = store.execution_get(workflow_id, using=self.using)
        if row is None:
            raise NotFoundError(f"execution {workflow_id} does not exist", id=workflow_id)
        return row


def _reason(reason: Any) -> str:
    """An operator's reason as every database keeps it, or ``DefinitionError`` before
    anything is written (PostgreSQL would refuse a NUL in the middle of the cancel)."""
    if not isinstance(reason, str):
        raise DefinitionError(f"the reason must be a string, not {type(reason).__name__}")
    if len(reason) > MAX_REASON_CHARS:
        raise DefinitionError(
            f"the reason is {len(reason)} characters long, over {MAX_REASON_CHARS}"
        )
    if holds_unstorable(reason):
        raise DefinitionError(
            "the reason holds a NUL character or an unpaired surrogate, which not every "
            "database keeps"
        )
    return reason

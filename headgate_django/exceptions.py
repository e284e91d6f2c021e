"""The exception tree of headgate-django.

One root, :class:`HeadgateError`; each class's docstring's first paragraph is its default message, so
``raise LeaseLostError()`` already says something useful. Exceptions that reach the HTTP
API carry ``status_code`` and ``default_code``, and the API maps them in one place.

Control flow is not an error: ``Snooze``, ``Skip`` and ``durable.Uncertain`` live in
:mod:`headgate_django.control` and are raised by handlers on purpose.

This module is pure (no Django import) so the kernel may use it.
"""

from __future__ import annotations

import inspect
from typing import Any


class HeadgateError(Exception):
    """A headgate-django error."""

    status_code = 500
    default_code = "error"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or _summary(self.__doc__)
        self.details = details
        super().__init__(self.message)


def _summary(doc: str | None) -> str:
    """A docstring's first paragraph on one line: the message an error gives by default."""
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


# -- configuration -------------------------------------------------------------------


class ConfigurationError(HeadgateError):
    """The HEADGATE settings are invalid."""

    default_code = "configuration_error"


# -- definition: bad input caught before anything is written ------------------------


class DefinitionError(HeadgateError, ValueError):
    """The definition is invalid."""

    status_code = 422
    default_code = "invalid_definition"

    def __init__(self, message: str | None = None, *, node: str | None = None, **details: Any):
        self.node = node
        if node is not None:
            details["node"] = node
        super().__init__(message, **details)


class InvalidKindError(DefinitionError):
    """The job kind is not a valid name."""

    default_code = "invalid_kind"


class InternalKindError(DefinitionError):
    """This job kind is internal to headgate-django: only the library's own builders make it."""

    default_code = "internal_kind"


class ReservedIdError(DefinitionError):
    """This id is reserved: ids that start with ``sched:`` belong to schedules' ticks."""

    default_code = "reserved_id"


class PayloadError(DefinitionError):
    """The payload cannot be stored."""

    default_code = "invalid_payload"


class PayloadNotJSONError(PayloadError, TypeError):
    """The payload is not JSON-serialisable.

    A ``TypeError`` too, as ``json.dumps`` and Django's Tasks API raise for arguments they
    cannot serialise: code written for any Tasks backend catches it.
    """


class PayloadTooLargeError(PayloadError):
    """The payload is larger than the configured limit."""

    status_code = 413
    default_code = "payload_too_large"


class ResultTooLargeError(PayloadTooLargeError):
    """The result is larger than the configured limit."""

    default_code = "result_too_large"


class OutputTooLargeError(PayloadTooLargeError):
    """The job's output is larger than the limit."""

    default_code = "output_too_large"


class BatchError(DefinitionError):
    """The batch is invalid."""

    default_code = "invalid_batch"


class BulkLimitError(DefinitionError):
    """More jobs match the bulk action than one action may change."""

    status_code = 413
    default_code = "bulk_too_large"


class GraphError(DefinitionError):
    """The workflow graph is invalid."""

    default_code = "invalid_graph"


class CycleError(GraphError):
    """The workflow graph has a cycle."""

    default_code = "graph_cycle"


class UnknownDependencyError(GraphError):
    """A node depends on a node that is not declared."""

    default_code = "unknown_dependency"


class DuplicateNodeError(GraphError):
    """Two nodes share a name."""

    default_code = "duplicate_node"


class GraphLimitError(GraphError):
    """The workflow graph exceeds a documented limit."""

    default_code = "graph_limit"


class ScheduleError(DefinitionError):
    """The schedule is invalid."""

    default_code = "invalid_schedule"


class DeclaredScheduleError(ScheduleError):
    """The schedule is declared in HEADGATE['SCHEDULES']: change it there."""

    status_code = 409
    default_code = "declared_schedule"


class UnknownTaskError(DefinitionError):
    """No task is registered under this kind."""

    status_code = 404
    default_code = "unknown_task"


# -- store ---------------------------------------------------------------------------


class StoreError(HeadgateError):
    """The store refused the operation."""

    default_code = "store_error"


class LeaseLostError(StoreError):
    """The lease on this job was lost: stop work immediately, nothing more will be written."""

    status_code = 409
    default_code = "lease_lost"


class DeadlineExceededError(LeaseLostError):
    """The job's deadline passed: it was archived (deadline_exceeded) and the attempt must stop.

    A :class:`LeaseLostError`, so a handler that stops on a lost lease stops here too.
    """

    default_code = "deadline_exceeded"


class NotFoundError(StoreError):
    """The requested object does not exist."""

    status_code = 404
    default_code = "not_found"


class IdConflictError(StoreError):
    """A job with this id already exists with different content."""

    status_code = 409
    default_code = "id_conflict"


class DuplicateError(StoreError):
    """A live job already holds this unique key.

    ``existing_id`` names the holder. ``replaced`` is whether it took the new values
    (``unique_replace``, ``unique_debounce``); an enqueue that replaced a holder returns
    its id rather than raising, so a raised error says ``False``.
    """

    status_code = 409
    default_code = "duplicate"

    def __init__(
        self,
        message: str | None = None,
        *,
        existing_id: str,
        replaced: bool = False,
        **details: Any,
    ):
        self.existing_id = existing_id
        self.replaced = replaced
        super().__init__(message, existing_id=existing_id, replaced=replaced, **details)


class RevisionConflictError(StoreError):
    """The expected revision does not match the current one."""

    status_code = 409
    default_code = "revision_conflict"


class QuarantinedError(StoreError):
    """This job's fingerprint is quarantined after repeated crashes."""

    status_code = 423
    default_code = "quarantined"

    def __init__(self, message: str | None = None, *, fingerprint: str, **details: Any):
        self.fingerprint = fingerprint
        super().__init__(message, fingerprint=fingerprint, **details)


class BackpressureError(StoreError):
    """The queue holds as many unfinished jobs as its backpressure limit allows."""

    status_code = 429
    default_code = "backpressure"

    def __init__(
        self,
        message: str | None = None,
        *,
        queue: str,
        limit: int,
        current: int,
        incoming: int,
        **details: Any,
    ):
        self.queue, self.limit, self.current, self.incoming = queue, limit, current, incoming
        super().__init__(
            message, queue=queue, limit=limit, current=current, incoming=incoming, **details
        )


class CountMismatchError(StoreError):
    """The selection does not match the number of jobs the caller expected: nothing changed."""

    status_code = 409
    default_code = "count_mismatch"


class InvalidTransitionError(StoreError):
    """The job cannot make this transition from its current state."""

    status_code = 409
    default_code = "invalid_transition"


# -- waiting for a job (enqueue_and_wait) --------------------------------------------


class WaitTimeoutError(HeadgateError, TimeoutError):
    """The job did not finish within the timeout; it is still queued or running."""

    status_code = 504
    default_code = "wait_timeout"

    def __init__(self, message: str | None = None, *, job_id: str, state: str, **details: Any):
        self.job_id = job_id
        self.state = state
        super().__init__(message, job_id=job_id, state=state, **details)


class WaitInTransactionError(HeadgateError, RuntimeError):
    """Cannot wait for a job inside a transaction: workers see it only after the commit."""

    default_code = "wait_in_transaction"


# -- running a handler ---------------------------------------------------------------


class TransactionLeftOpenError(HeadgateError, RuntimeError):
    """The handler returned with a transaction still open; its writes were rolled back."""

    default_code = "transaction_left_open"


class WorkerIdInUseError(HeadgateError):
    """A live worker already runs under this worker id."""

    status_code = 409
    default_code = "worker_id_in_use"


# -- replay --------------------------------------------------------------------------


class ReplayError(HeadgateError):
    """Replaying the workflow failed."""

    default_code = "replay_error"


class NondeterminismError(ReplayError):
    """The workflow code no longer matches its recorded history."""

    status_code = 409
    default_code = "nondeterminism"


class HistoryCorruptError(NondeterminismError):
    """The recorded history is malformed: no run of any workflow code could have written it.

    A subclass of :class:`NondeterminismError` so the durable runtime treats both the same
    way (back off, then suspend for an operator) instead of failing the execution.
    """

    default_code = "history_corrupt"


class HandlerCommandError(ReplayError):
    """Query, update and validator handlers only read and change ``ctx.state``: they cannot
    schedule Operations, start timers, wait for signals or select."""

    status_code = 422
    default_code = "handler_command"


class OperationFailedError(HeadgateError):
    """The Operation failed.

    Raised inside workflow code by ``Future.result()`` when the Operation's recorded outcome
    is a failure; the workflow may catch it and carry on.
    """

    status_code = 422
    default_code = "operation_failed"


class ChildFailedError(HeadgateError):
    """The child execution did not succeed.

    Raised inside the parent's workflow code by the child handle's ``result()`` when the
    child failed, was cancelled or could not start. ``child_id`` names the child and
    ``reason`` says why, as the child's own ``failure_reason`` does; the parent may catch
    it and carry on.
    """

    status_code = 422
    default_code = "child_failed"

    def __init__(
        self, message: str | None = None, *, child_id: str, reason: str, state: str, **details: Any
    ) -> None:
        self.child_id = child_id
        self.reason = reason
        self.state = state
        super().__init__(message, child_id=child_id, reason=reason, state=state, **details)


# -- conditions (CEL) ----------------------------------------------------------------


class ConditionError(GraphError):
    """The condition expression is invalid."""

    default_code = "invalid_condition"


class ConditionEvaluationError(ConditionError):
    """The condition expression did not evaluate to a boolean."""

    default_code = "condition_evaluation_failed"


# -- queries and updates of durable executions ---------------------------------------


class UnknownHandlerError(DefinitionError):
    """The workflow has no query or update handler of this name."""

    status_code = 404
    default_code = "unknown_handler"


class QueryFailedError(HeadgateError):
    """The query handler raised; its message says why."""

    status_code = 422
    default_code = "query_failed"


class UpdateRejectedError(HeadgateError):
    """The update's validator rejected it; nothing was recorded."""

    status_code = 422
    default_code = "update_rejected"


class UpdateFailedError(HeadgateError):
    """The update was recorded, but its handler raised (or the workflow ended first)."""

    status_code = 422
    default_code = "update_failed"


class UpdateTimeoutError(HeadgateError, TimeoutError):
    """The update was accepted but not handled within the timeout; it will still run."""

    status_code = 504
    default_code = "update_timeout"

    def __init__(self, message: str | None = None, *, update_id: str, **details: Any) -> None:
        self.update_id = update_id
        super().__init__(message, update_id=update_id, **details)


def exception_reason(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"`` (or the type alone when the message is empty), the
    way a failure is recorded. An exception whose ``__str__`` raises is still described: a
    failure's record must not fail, or the failure handling itself would crash."""
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable message>"
    name = type(exc).__qualname__
    return f"{name}: {message}" if message else name

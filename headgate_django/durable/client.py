"""``durable.Client``: start executions and deliver signals to them (or both at once).

Each verb validates everything before it writes, so bad input is a clear error and leaves
no trace: an input, ``meta`` or signal payload that is not JSON or is over
``HEADGATE["MAX_PAYLOAD_BYTES"]`` is refused here, the one door a caller's starts and
signals (the API's routes and schedule ticks too) come through. Each write is one
transaction (the header, ``WorkflowStarted`` and the first task; the inbox row,
``SignalReceived`` and the wake-up; for signal-with-start, both).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from headgate_django.durable.registry import check_execution_id, check_name, require_workflow
from headgate_django.envelope import check_payload, new_id
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.names import check_not_reserved, validate_queue
from headgate_django.kernel.replay import MAX_EXECUTION_ID
from headgate_django.store import durable as store


@dataclass(frozen=True)
class StartResult:
    """``workflow_id`` of the new execution, or of the live one holding the business key
    (then ``deduplicated`` is True and nothing was written)."""

    workflow_id: str
    deduplicated: bool


@dataclass(frozen=True)
class SignalWithStartResult:
    """``workflow_id`` of the execution that got the signal; ``started`` is True when this
    call started it, ``delivered`` False when ``message_id`` had already been delivered."""

    workflow_id: str
    started: bool
    delivered: bool


class Client:
    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def start(
        self,
        name: str,
        version: str,
        input: Any = None,
        business_idempotency_key: str | None = None,
        workflow_id: str | None = None,
        task_queue: str = "default",
        meta: dict[str, Any] | None = None,
    ) -> StartResult:
        """Start workflow ``name`` at ``version`` with ``input`` (JSON).

        While an execution of ``name`` holding ``business_idempotency_key`` is running or
        suspended, this returns it instead (``deduplicated=True``); a finished one frees
        the key. Joins the caller's transaction when there is one.
        """
        start = self._start_row(
            name, version, input, business_idempotency_key, workflow_id, task_queue, meta
        )
        started, deduplicated = store.execution_start(**start, using=self.using)
        return StartResult(started, deduplicated)

    def signal_with_start(
        self,
        workflow: str,
        version: str,
        input: Any,
        signal_name: str,
        payload: Any = None,
        *,
        business_idempotency_key: str,
        message_id: str | None = None,
        task_queue: str = "default",
        meta: dict[str, Any] | None = None,
    ) -> SignalWithStartResult:
        """Deliver signal ``signal_name`` to the live execution of ``workflow`` holding
        ``business_idempotency_key``, starting it (at ``version``, with ``input``) first
        when there is none — both in one transaction, so the signal is never lost between a
        start and a delivery, and two callers never start two executions.

        A repeated ``message_id`` for the name is not delivered again. Every argument is
        checked, as by :meth:`start` and :meth:`signal`, before anything is written.
        """
        # Required here: without a key there is no "live execution" to signal instead.
        check_name("business idempotency key", business_idempotency_key, 255)
        start = self._start_row(
            workflow, version, input, business_idempotency_key, None, task_queue, meta
        )
        self._check_signal(signal_name, payload, message_id)
        workflow_id, started, delivered = store.execution_signal_with_start(
            start,
            signal_name=signal_name,
            payload=payload,
            message_id=message_id,
            using=self.using,
        )
        return SignalWithStartResult(workflow_id, started, delivered)

    def _start_row(
        self,
        name: str,
        version: str,
        input: Any,
        business_idempotency_key: str | None,
        workflow_id: str | None,
        task_queue: str,
        meta: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The validated arguments of ``store.execution_start``; raises before any write."""
        require_workflow(name, version)
        check_payload(input, "start's input")
        if meta is not None and not isinstance(meta, dict):
            raise DefinitionError("meta must be a dict of JSON values")
        check_payload(meta or {}, "start's meta")
        if business_idempotency_key is not None:
            check_name("business idempotency key", business_idempotency_key, 255)
            check_not_reserved("business idempotency key", business_idempotency_key)
        execution_id = new_id() if workflow_id is None else workflow_id
        check_execution_id("workflow id", execution_id, MAX_EXECUTION_ID)
        check_not_reserved("workflow id", execution_id)
        validate_queue(task_queue)
        return {
            "execution_id": execution_id,
            "name": name,
            "version": version,
            "input": input,
            "seed": uuid.uuid4().hex,
            "business_key": business_idempotency_key,
            "task_queue": task_queue,
            "meta": meta or {},
        }

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, message_id: str | None = None
    ) -> bool:
        """Deliver signal ``name`` with ``payload`` (JSON); False if ``message_id`` was
        already delivered for this name. Raises ``NotFoundError`` for a missing execution.

        Signals may arrive before the workflow waits for them; the k-th ``wait_signal(name)``
        of the workflow gets the k-th delivery.
        """
        self._check_signal(name, payload, message_id)
        return store.signal_deliver(
            workflow_id, name=name, payload=payload, message_id=message_id, using=self.using
        )

    @staticmethod
    def _check_signal(name: str, payload: Any, message_id: str | None) -> None:
        check_name("signal name", name, 128)
        if message_id is not None:
            check_name("message id", message_id, 255)
        check_payload(payload, f"payload of signal {name!r}")

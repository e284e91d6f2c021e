"""``durable.Client``: start executions and deliver signals to them.

Both validate everything before they write, so bad input is a clear error and leaves no
trace; each write is one transaction (the header, ``WorkflowStarted`` and the first task;
the inbox row, ``SignalReceived`` and the wake-up).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from headgate_django.durable.registry import check_name, find_workflow, registered_workflows
from headgate_django.envelope import canonical_json, new_id
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.names import validate_queue
from headgate_django.store import durable as store

MAX_WORKFLOW_ID = 200


@dataclass(frozen=True)
class StartResult:
    """``workflow_id`` of the new execution, or of the live one holding the business key
    (then ``deduplicated`` is True and nothing was written)."""

    workflow_id: str
    deduplicated: bool


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
        if find_workflow(name, version) is None:
            known = sorted(d.version for d in registered_workflows() if d.name == name)
            raise DefinitionError(
                f"no durable workflow {name!r} version {version!r} is registered here"
                + (f" (versions: {', '.join(known)})" if known else ""),
                workflow=name,
                version=version,
            )
        canonical_json(input)  # PayloadError when it is not JSON
        if meta is not None and not isinstance(meta, dict):
            raise DefinitionError("meta must be a dict of JSON values")
        canonical_json(meta or {})
        if business_idempotency_key is not None:
            check_name("business idempotency key", business_idempotency_key, 255)
        execution_id = new_id() if workflow_id is None else workflow_id
        check_name("workflow id", execution_id, MAX_WORKFLOW_ID)
        validate_queue(task_queue)
        started, deduplicated = store.execution_start(
            execution_id=execution_id,
            name=name,
            version=version,
            input=input,
            seed=uuid.uuid4().hex,
            business_key=business_idempotency_key,
            task_queue=task_queue,
            meta=meta or {},
            using=self.using,
        )
        return StartResult(started, deduplicated)

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, message_id: str | None = None
    ) -> bool:
        """Deliver signal ``name`` with ``payload`` (JSON); False if ``message_id`` was
        already delivered for this name. Raises ``NotFoundError`` for a missing execution.

        Signals may arrive before the workflow waits for them; the k-th ``wait_signal(name)``
        of the workflow gets the k-th delivery.
        """
        check_name("signal name", name, 128)
        if message_id is not None:
            check_name("message id", message_id, 255)
        canonical_json(payload)
        return store.signal_deliver(
            workflow_id, name=name, payload=payload, message_id=message_id, using=self.using
        )

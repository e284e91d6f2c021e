"""Workflow signal emissions: record first, release the waiting signal jobs second.

Both happen in one transaction, so an emission can never be lost between the two; and
because the record is what releases the job, emitting before the coordinator's first
tick is safe (the released signal job is buffered until its dependencies complete).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from headgate_django.exceptions import IdConflictError
from headgate_django.kernel.states import State
from headgate_django.models import Job, SignalEmission
from headgate_django.store import vendor as v
from headgate_django.store.workflow_records import is_earlier, workflow_forget_earlier
from headgate_django.store.workflows import coordinator_job_id

#: Newest emissions kept per workflow: also the idempotency horizon of their keys.
KEEP_PER_WORKFLOW = 100


@dataclass(frozen=True)
class EmitResult:
    record: SignalEmission
    inserted: bool
    promoted: int


def signal_emit(
    *,
    workflow_id: str,
    signal: str,
    idempotency_key: str,
    payload: Any,
    source: Any,
    content_hash: str,
    signal_job_ids: Sequence[str],
    using: str = "default",
) -> EmitResult:
    """Record the emission (store-stamped) and promote the matching pending signal jobs.

    The same key with the same content returns the original record (``inserted=False``);
    with other content it is an :class:`IdConflictError` and nothing is written.
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using):
        existing = _existing(workflow_id, idempotency_key, content_hash, using)
        if existing is not None:
            return EmitResult(existing, False, 0)
        try:
            with transaction.atomic(using=using):
                record = _insert(
                    conn, workflow_id, signal, idempotency_key, payload, source, content_hash, using
                )
        except IntegrityError:
            # A concurrent emission with the same key won the race: classify against it.
            existing = _existing(workflow_id, idempotency_key, content_hash, using)
            if existing is None:
                raise
            return EmitResult(existing, False, 0)
        promoted = _release(conn, signal_job_ids)
        _trim(workflow_id, using)
    return EmitResult(record, True, promoted)


def _existing(workflow_id: str, key: str, content_hash: str, using: str) -> SignalEmission | None:
    found = (
        SignalEmission.objects.using(using)
        .filter(workflow_id=workflow_id, idempotency_key=key)
        .first()
    )
    if found is not None and _earlier_workflows(found, using):
        # Not a repeat: the key was used by an earlier workflow of this id, whose records
        # go now (the new one's first tick would delete them too).
        workflow_forget_earlier(workflow_id, using=using)
        return None
    if found is not None and found.content_hash != content_hash:
        raise IdConflictError(
            f"idempotency key {key!r} was already used for a different emission to "
            f"workflow {workflow_id!r}",
            idempotency_key=key,
        )
    return found


def _earlier_workflows(emission: SignalEmission, using: str) -> bool:
    """Whether ``emission`` was sent to an earlier workflow of its id
    (:mod:`.workflow_records`)."""
    enqueued = (
        Job.objects.using(using)
        .filter(pk=coordinator_job_id(emission.workflow_id))
        .values_list("enqueued_at", flat=True)
        .first()
    )
    return is_earlier(emission.emitted_at, enqueued)


def _insert(
    conn: Any,
    workflow_id: str,
    signal: str,
    key: str,
    payload: Any,
    source: Any,
    content_hash: str,
    using: str,
) -> SignalEmission:
    fields = SignalEmission._meta
    values = {
        "workflow_id": workflow_id,
        "signal": signal,
        "idempotency_key": key,
        "payload": payload,
        "source": source,
        "content_hash": content_hash,
    }
    params = [
        fields.get_field(k).get_db_prep_save(val, connection=conn)  # type: ignore[union-attr]
        for k, val in values.items()
    ]
    with conn.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO headgate_signal_emission ({', '.join(map(conn.ops.quote_name, values))}, "
            "emitted_at) "
            f"VALUES ({v.placeholders(len(values))}, {v.now(conn)})",
            params,
        )
    return SignalEmission.objects.using(using).get(workflow_id=workflow_id, idempotency_key=key)


def _release(conn: Any, job_ids: Sequence[str]) -> int:
    if not job_ids:
        return 0
    with conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE {v.jobs_by_id(conn)} SET state = %s, scheduled_at = {v.now(conn)} "
            f"WHERE id IN ({v.placeholders(len(job_ids))}) AND state = %s",
            [State.AVAILABLE.value, *job_ids, State.PENDING.value],
        )
        return cursor.rowcount


def _trim(workflow_id: str, using: str) -> None:
    """Keep the newest :data:`KEEP_PER_WORKFLOW` emissions of the workflow."""
    qs = SignalEmission.objects.using(using).filter(workflow_id=workflow_id)
    boundary = qs.order_by("-id").values_list("id", flat=True)[
        KEEP_PER_WORKFLOW : KEEP_PER_WORKFLOW + 1
    ]
    ids = list(boundary)
    if ids:
        qs.filter(id__lte=ids[0]).delete()


def signal_list(
    workflow_id: str, *, before: int | None = None, limit: int = 100, using: str = "default"
) -> list[SignalEmission]:
    """Newest first; ``before`` is an emission id (cursor)."""
    qs = SignalEmission.objects.using(using).filter(workflow_id=workflow_id)
    if before is not None:
        qs = qs.filter(id__lt=before)
    return list(qs.order_by("-id")[:limit])


def signal_latest(
    workflow_id: str, signal: str, *, using: str = "default"
) -> SignalEmission | None:
    return (
        SignalEmission.objects.using(using)
        .filter(workflow_id=workflow_id, signal=signal)
        .order_by("-id")
        .first()
    )

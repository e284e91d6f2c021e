"""Store verbs of the API's idempotency records: claim a key, save its response, purge.

A key is *claimed* by inserting its row inside the transaction that performs the mutation,
before the mutation runs. A concurrent request with the same key then blocks on the unique
index (PostgreSQL, MySQL) or on the writer lock (SQLite) until the first commits, and fails
to insert: it can only ever replay the winner's response, never run the mutation twice.
If the mutation fails, its transaction — and so the claim — rolls back, and the key stays
free for a retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction

from headgate_django.models import IdempotencyRecord
from headgate_django.store.vendor import db_now

#: Rows deleted per purge statement, so one purge never holds long locks.
PURGE_BATCH = 1000


@dataclass(frozen=True)
class RequestIdentity:
    """What makes two requests "the same request" for one key."""

    key_digest: str
    key: str
    user: str
    method: str
    path: str
    body_hash: str


def idempotency_record_find(key_digest: str, *, using: str = "default") -> IdempotencyRecord | None:
    """The unexpired record for this key, if any (expiry judged by the store clock, not
    Django's ``Now()``, which on MySQL follows the session time zone)."""
    return (
        IdempotencyRecord.objects.using(using)
        .filter(key_digest=key_digest, expires_at__gt=db_now(using))
        .first()
    )


def idempotency_record_claim(
    identity: RequestIdentity, *, ttl: timedelta, using: str = "default"
) -> IdempotencyRecord:
    """Insert the placeholder row for a key; raises ``IntegrityError`` when it is taken.

    Must run inside the caller's transaction (the one that performs the mutation). An
    expired row for the same key is deleted first, so a key becomes reusable at expiry
    even before the purge duty has run.
    """
    now = db_now(using)
    rows = IdempotencyRecord.objects.using(using)
    rows.filter(key_digest=identity.key_digest, expires_at__lte=now).delete()
    with transaction.atomic(using=using):
        return rows.create(
            key_digest=identity.key_digest,
            key=identity.key,
            user=identity.user,
            method=identity.method,
            path=identity.path,
            body_hash=identity.body_hash,
            created_at=now,
            expires_at=now + ttl,
        )


def idempotency_record_save(
    record: IdempotencyRecord,
    *,
    status_code: int,
    headers: dict[str, Any],
    body: bytes,
    using: str = "default",
) -> None:
    """Store the response of a claimed key (same transaction as the claim)."""
    IdempotencyRecord.objects.using(using).filter(pk=record.pk).update(
        status_code=status_code, response_headers=headers, response_body=body
    )


def idempotency_purge_expired(*, limit: int = PURGE_BATCH, using: str = "default") -> int:
    """Delete up to ``limit`` expired records, the first to expire first; returns how many
    went.

    In the order of the ``expires_at`` index, the ``LIMIT`` stops after ``limit`` entries;
    the model's own order (newest first) sorted every expired record for each batch.
    """
    now = db_now(using)
    rows = IdempotencyRecord.objects.using(using)
    expired = rows.filter(expires_at__lte=now).order_by("expires_at")
    ids = list(expired.values_list("pk", flat=True)[:limit])
    if not ids:
        return 0
    deleted, _ = rows.filter(pk__in=ids, expires_at__lte=now).delete()
    return deleted

"""``Idempotency-Key``: required on every mutation; the same request replays, byte for byte.

Headgate only checks that the header is present. Here each key is scoped to the user and
remembered with the request's method, path (with query) and body hash, and the response it
got. Within ``HEADGATE["IDEMPOTENCY_TTL"]`` (24 h by default):

- the same key with the same request returns the stored status and body byte for byte,
  without running the mutation again (plus an ``Idempotent-Replayed: true`` header);
- the same key with a different method, path or body is refused with 409;
- two concurrent requests with one key run the mutation once: the key is claimed inside
  the mutation's own transaction (see :mod:`headgate_django.store.idempotency`).

Only successful (2xx) responses are recorded. A failed mutation changed nothing (its
transaction rolled back), so retrying it with the same key runs it again — which is what
a client retrying after a 409 revision conflict or a 503 wants.

The body is hashed as canonical JSON when it parses, so re-indenting a request does not
make it "different".

A replay never shows more than a fresh answer would: a response recorded while the user
held ``view_job_payload`` (so it may carry user data) is not replayed once they no longer
do (403 ``payload_permission_required``; the mutation itself was done).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpResponse, HttpResponseBase
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api.errors import (
    IdempotencyKeyRequired,
    IdempotencyKeyReused,
    PayloadPermissionRequired,
)
from headgate_django.conf import headgate_settings
from headgate_django.envelope import canonical_json
from headgate_django.store.idempotency import (
    RequestIdentity,
    idempotency_record_claim,
    idempotency_record_find,
    idempotency_record_save,
)
from headgate_django.visibility import may_see_payloads

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
#: Response headers that are part of what is replayed.
KEPT_HEADERS = ("Content-Type", "Location", "X-Released-Jobs")
REPLAYED_HEADER = "Idempotent-Replayed"
#: Kept with a record, never sent: the response was rendered for a user who could see
#: user data.
_REVEALED = "X-Headgate-Revealed"


class _KeyTaken(Exception):
    """The claim insert lost to a concurrent request with the same key."""


def require_key(request: Request) -> str:
    key = request.headers.get(HEADER, "")
    if not key or len(key) > MAX_KEY_LENGTH or not all(33 <= ord(c) <= 126 for c in key):
        raise IdempotencyKeyRequired()
    return key


def body_hash(raw: bytes) -> str:
    try:
        data = canonical_json(json.loads(raw)) if raw else b""
    except Exception:  # not JSON (DRF answers 400 later): the raw bytes are the identity
        data = raw
    return hashlib.sha256(data).hexdigest()


def identity_of(request: Request, key: str) -> RequestIdentity:
    user = str(request.user.pk)
    return RequestIdentity(
        key_digest=hashlib.sha256(f"{user}\0{key}".encode()).hexdigest(),
        key=key,
        user=user,
        method=request.method or "",
        path=request.get_full_path(),
        body_hash=body_hash(request._request.body),
    )


def _same_request(record: Any, identity: RequestIdentity) -> bool:
    return (record.method, record.path, record.body_hash) == (
        identity.method,
        identity.path,
        identity.body_hash,
    )


def _replay(record: Any, identity: RequestIdentity, request: Request) -> HttpResponse:
    if not _same_request(record, identity):
        raise IdempotencyKeyReused(idempotency_key=identity.key)
    headers = dict(record.response_headers)
    if headers.pop(_REVEALED, None) and not may_see_payloads(request.user):
        raise PayloadPermissionRequired(
            "This key's response was recorded with user data, which you may no longer see "
            "(headgate_django.view_job_payload); the request it answered was carried out."
        )
    response = HttpResponse(bytes(record.response_body), status=record.status_code)
    if "Content-Type" not in headers:
        del response["Content-Type"]
    for name, value in headers.items():
        response[name] = value
    response[REPLAYED_HEADER] = "true"
    return response


def _freeze(response: HttpResponseBase) -> HttpResponse:
    """Render a view's response to the exact bytes that will be stored and sent."""
    if isinstance(response, Response):
        body = b"" if response.data is None else JSONRenderer().render(response.data)
        frozen = HttpResponse(body, status=response.status_code)
        if response.data is None:
            del frozen["Content-Type"]
        else:
            frozen["Content-Type"] = "application/json"
        for name, value in response.headers.items():
            if name.lower() != "content-type":
                frozen[name] = value
        return frozen
    assert isinstance(response, HttpResponse)
    return response


def run_idempotent(
    request: Request, key: str, handler: Callable[[], HttpResponseBase]
) -> HttpResponseBase:
    """Replay, refuse, or run ``handler`` once for this key and remember its response."""
    identity = identity_of(request, key)
    found = idempotency_record_find(identity.key_digest)
    if found is not None:
        return _replay(found, identity, request)
    try:
        with transaction.atomic():
            try:
                record = idempotency_record_claim(identity, ttl=headgate_settings.IDEMPOTENCY_TTL)
            except IntegrityError as exc:
                raise _KeyTaken() from exc
            response = _freeze(handler())
            if 200 <= response.status_code < 300:
                headers = {h: response[h] for h in KEPT_HEADERS if response.has_header(h)}
                if may_see_payloads(request.user):
                    headers[_REVEALED] = "1"
                idempotency_record_save(
                    record,
                    status_code=response.status_code,
                    headers=headers,
                    body=response.content,
                )
            else:
                transaction.set_rollback(True)
            return response
    except _KeyTaken:
        winner = idempotency_record_find(identity.key_digest)
        if winner is None:
            raise IdempotencyKeyReused(
                "A concurrent request with this Idempotency-Key failed; retry.",
                idempotency_key=key,
            ) from None
        return _replay(winner, identity, request)

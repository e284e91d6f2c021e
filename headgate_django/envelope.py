"""What one job will be before it is stored: the :class:`Envelope`.

An envelope is a frozen value, so a workflow builder or a test can hold one, compare it,
and ``dataclasses.replace(env, id=...)`` it without surprising anyone else holding it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from headgate_django.exceptions import PayloadError

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


# RFC 4648 base32 → Crockford's alphabet, so the C encoder can do the digit loop.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())


# Every pair of Crockford characters, indexed by the ten bits they encode.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]


def new_id() -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, so ids sort by creation.

    Its 26 characters are the 128 bits read five at a time from the top, the first holding
    two zero bits: one character, twelve pairs of ten bits, one character. Spelled out,
    because a single enqueue makes one id and a loop or the base32 encoder (pure Python
    before 3.13) cost it several times as much.
    """
    n = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    p = _PAIRS
    return (
        _CROCKFORD[n >> 125]
        + p[(n >> 115) & 1023]
        + p[(n >> 105) & 1023]
        + p[(n >> 95) & 1023]
        + p[(n >> 85) & 1023]
        + p[(n >> 75) & 1023]
        + p[(n >> 65) & 1023]
        + p[(n >> 55) & 1023]
        + p[(n >> 45) & 1023]
        + p[(n >> 35) & 1023]
        + p[(n >> 25) & 1023]
        + p[(n >> 15) & 1023]
        + p[(n >> 5) & 1023]
        + _CROCKFORD[n & 31]
    )


def new_ids(n: int) -> list[str]:
    """``n`` ULIDs of the current millisecond, encoded in one pass (a batch enqueue's ids)."""
    ms = int(time.time() * 1000)
    randoms = os.urandom(10 * n)
    text = _encoded(b"".join(_ulid_block(ms, randoms[i : i + 10]) for i in range(0, 10 * n, 10)))
    return [text[i : i + 26] for i in range(0, 32 * n, 32)]


def _ulid_block(ms: int, random: bytes) -> bytes:
    """The ULID of ``ms`` and 10 random bytes, shifted left by 30 bits into 20 bytes.

    A ULID's 26 characters are its 128 bits read 5 at a time from the top, the first one
    holding two zero bits. Shifted like this, its base32 encoding is exactly those 26
    characters and six zeros, and 20-byte blocks encode independently, so one call to
    the C encoder serves a whole batch.
    """
    return ((ms << 110) | (int.from_bytes(random, "big") << 30)).to_bytes(20, "big")


def _encoded(blocks: bytes) -> str:
    return base64.b32encode(blocks).translate(_TO_CROCKFORD).decode()


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: the same value always hashes the same."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not JSON-serialisable: {exc}") from exc


#: What :func:`encode_call` writes for a call without arguments.
NO_ARGUMENTS = b'{"args":[],"kwargs":{}}'


def encode_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    if not args and not kwargs:  # what canonical_json would write, without the encoder
        return NO_ARGUMENTS
    return canonical_json({"args": list(args), "kwargs": kwargs})


def decode_call(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
    """Inverse of :func:`encode_call`; raises ``ValueError`` on anything else.

    A JSON object that is not exactly ``{"args": …, "kwargs": …}`` is read as keyword
    arguments, so that a payload written by hand (an operator's repair, an HTTP enqueue:
    ``{"email": "new@example.com"}``) needs no wrapper. ``encode_call`` always writes the
    full form, so nothing it produced is read differently.
    """
    if payload == NO_ARGUMENTS:  # most jobs: skip the parser (a fresh list and dict each time)
        return [], {}
    data = json.loads(bytes(payload))
    if not isinstance(data, dict):
        raise ValueError("payload is not a JSON object")
    if set(data) != {"args", "kwargs"}:
        return [], data
    if not isinstance(data["args"], list) or not isinstance(data["kwargs"], dict):
        raise ValueError("payload args must be a list and kwargs an object")
    return data["args"], data["kwargs"]


def fingerprint(kind: str, payload: bytes) -> str:
    """Headgate's fingerprint: the crash-quarantine unit (kind and payload, not the job)."""
    k = kind.encode()
    digest = hashlib.sha256(
        struct.pack("<I", len(k)) + k + struct.pack("<I", len(payload)) + bytes(payload)
    )
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Envelope:
    """One job, ready to be enqueued.

    ``id`` is generated at enqueue time when left ``None``. ``scheduled_at`` (an absolute
    instant) and ``delay`` (relative to the store clock) are mutually exclusive; so are
    either of them and ``pending`` (a pending job waits for an explicit promotion).
    """

    kind: str
    payload: bytes = NO_ARGUMENTS
    id: str | None = None
    queue: str = "default"
    priority: int = 0
    schema_version: int = 1
    max_attempts: int | None = None
    retention: timedelta | None = None
    timeout: timedelta | None = None
    scheduled_at: datetime | None = None
    delay: timedelta | None = None
    pending: bool = False
    unique_key: str | None = None
    workflow_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.kind, self.payload)

"""Sealed payloads: AES-256-GCM with a key id, so keys can rotate (optional ``[encryption]``).

A sealed payload is ``MAGIC · len(key id) · key id · nonce (12 bytes) · ciphertext+tag``.
The header (magic and key id) is the AEAD's associated data, so changing the key id of a
stored payload makes it fail to open rather than open under another key. ``MAGIC`` starts
with a control character, which no encoded call (JSON text) can, so a plain payload is
never taken for a sealed one and both can sit in one queue during a rollout.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from functools import cache
from importlib.util import find_spec
from typing import Any

#: Whether the optional ``cryptography`` package is installed. It is imported only when a
#: payload is sealed or opened: a project without encryption does not pay its import
#: (about 15 ms) in every process that starts.
AVAILABLE = find_spec("cryptography") is not None

MAGIC = b"\x1ehg-sealed-v1:"
KEY_BYTES = 32
NONCE_BYTES = 12
MAX_KEY_ID_BYTES = 64


def is_sealed(payload: bytes) -> bool:
    return payload[: len(MAGIC)] == MAGIC


def parse_key(value: Any) -> bytes:
    """A 32-byte key given as bytes or as base64 text; ``ValueError`` otherwise."""
    if isinstance(value, str):
        try:
            value = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise ValueError("a key given as text must be base64") from None
    if not isinstance(value, bytes) or len(value) != KEY_BYTES:
        raise ValueError(f"a key must be {KEY_BYTES} bytes (AES-256)")
    return value


def check_key_id(key_id: Any) -> str:
    if not isinstance(key_id, str) or not key_id or len(key_id.encode()) > MAX_KEY_ID_BYTES:
        raise ValueError(f"a key id is text of 1–{MAX_KEY_ID_BYTES} bytes, got {key_id!r}")
    if any(ord(c) < 0x20 for c in key_id):
        raise ValueError(f"a key id has no control characters, got {key_id!r}")
    return key_id


def parse_ring(raw: Mapping[str, Any]) -> dict[str, bytes]:
    """The key ring setting as ``{key id: key}``; ``ValueError`` naming the bad entry."""
    ring = {}
    for key_id, value in raw.items():
        try:
            ring[check_key_id(key_id)] = parse_key(value)
        except ValueError as exc:
            raise ValueError(f"key {key_id!r}: {exc}") from None
    return ring


@cache
def _library() -> tuple[Any, type[Exception]]:
    """``AESGCM`` and ``InvalidTag``, imported on first use."""
    if not AVAILABLE:
        raise ValueError('payload encryption needs the cryptography package ("[encryption]")')
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM, InvalidTag


def seal(plain: bytes, key_id: str, key: bytes) -> bytes:
    aesgcm, _ = _library()
    kid = key_id.encode()
    header = MAGIC + bytes([len(kid)]) + kid
    nonce = secrets.token_bytes(NONCE_BYTES)
    return header + nonce + aesgcm(key).encrypt(nonce, plain, header)


def key_id_of(payload: bytes) -> str:
    """The key id a sealed payload names; ``ValueError`` for a malformed header."""
    start = len(MAGIC) + 1
    if len(payload) < start:
        raise ValueError("sealed payload is truncated")
    end = start + payload[len(MAGIC)]
    if len(payload) < end + NONCE_BYTES:
        raise ValueError("sealed payload is truncated")
    try:
        return payload[start:end].decode()
    except UnicodeDecodeError:
        raise ValueError("sealed payload has a malformed key id") from None


def unseal(payload: bytes, ring: Mapping[str, bytes]) -> bytes:
    """The plaintext; ``ValueError`` saying why not (unknown key id, tampered, no library)."""
    key_id = key_id_of(payload)
    key = ring.get(key_id)
    if key is None:
        raise ValueError(f"payload is encrypted with unknown key id {key_id!r}")
    aesgcm, invalid_tag = _library()
    end = len(MAGIC) + 1 + len(key_id.encode())
    header, nonce, body = (
        payload[:end],
        payload[end : end + NONCE_BYTES],
        payload[end + NONCE_BYTES :],
    )
    try:
        return bytes(aesgcm(key).decrypt(nonce, body, header))
    except invalid_tag:
        raise ValueError(f"payload does not decrypt with key {key_id!r} (altered?)") from None

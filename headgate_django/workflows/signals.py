"""Durable workflow signals: ``emit_signal_with``, ``emit_signal``, ``list_signals``.

``payload`` is the fact the workflow waits for and ``source`` says who or what emitted it;
``source`` is caller-supplied metadata, not proof of identity — fill it from your own
authenticated identity rather than from end-user input.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from headgate_django.envelope import canonical_json
from headgate_django.exceptions import DefinitionError, PayloadError, PayloadTooLargeError
from headgate_django.kernel.graph import NodeKind
from headgate_django.kernel.storable import MAX_JSON_DEPTH, nested_deeper_than
from headgate_django.models import SignalEmission as EmissionRow
from headgate_django.store.signals import signal_emit, signal_list
from headgate_django.workflows.inspect import MAX_PAGE, load_graph_of

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_SOURCE_BYTES = 16 * 1024
MAX_KEY_BYTES = 255
#: How deep lists and objects may nest: the store's rule for every kept value, less one
#: level for the payload, which the signal node's result holds under ``"payload"``.
MAX_SOURCE_DEPTH = MAX_JSON_DEPTH
MAX_PAYLOAD_DEPTH = MAX_JSON_DEPTH - 1


@dataclass(frozen=True)
class SignalEmission:
    """One emission request: ``signal`` name, ``idempotency_key``, ``payload``, ``source``."""

    signal: str
    idempotency_key: str
    payload: Any = None
    source: Any = None


@dataclass(frozen=True)
class SignalRecord:
    id: int
    workflow_id: str
    signal: str
    idempotency_key: str
    payload: Any
    source: Any
    emitted_at: datetime


@dataclass(frozen=True)
class SignalReceipt:
    matched: int  # declared signal nodes with this name
    promoted: int  # pending signal jobs this emission released
    inserted: bool  # False when the key replayed an earlier identical emission
    emission: SignalRecord


def _record(row: EmissionRow) -> SignalRecord:
    return SignalRecord(
        id=row.id,
        workflow_id=row.workflow_id,
        signal=row.signal,
        idempotency_key=row.idempotency_key,
        payload=row.payload,
        source=row.source,
        emitted_at=row.emitted_at,
    )


def _sized(value: Any, limit: int, depth: int, what: str) -> bytes:
    if nested_deeper_than(value, depth):
        # Deeper, the signal node could not keep its result (every attempt would fail,
        # and the workflow with it), and MariaDB would refuse the row outright.
        raise PayloadError(f"signal {what} nests lists and objects deeper than {depth} levels")
    data = canonical_json(value)
    if len(data) > limit:
        raise PayloadTooLargeError(
            f"signal {what} is {len(data)} bytes, over the {limit}-byte limit",
            size=len(data),
            limit=limit,
        )
    return data


def _refuse_nul(value: Any, what: str) -> None:
    """U+0000 anywhere in a string (or an object key) of ``value`` is refused: PostgreSQL
    stores neither it in text nor ``\\u0000`` in jsonb, so it would fail there with a
    database error while the other backends stored it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise DefinitionError(f"signal {what} contains a NUL character (U+0000)")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def emit_signal_with(workflow_id: str, emission: SignalEmission) -> SignalReceipt:
    """Record an emission and release every pending signal node waiting for it."""
    if not isinstance(emission.signal, str) or not emission.signal:
        raise DefinitionError("a signal needs a non-empty name")
    key = emission.idempotency_key
    if not isinstance(key, str) or not key or len(key.encode()) > MAX_KEY_BYTES:
        raise DefinitionError(f"an idempotency key must be 1–{MAX_KEY_BYTES} bytes")
    source = {} if emission.source is None else emission.source
    payload_bytes = _sized(emission.payload, MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH, "payload")
    source_bytes = _sized(source, MAX_SOURCE_BYTES, MAX_SOURCE_DEPTH, "source")
    _refuse_nul(emission.signal, "name")
    _refuse_nul(key, "idempotency key")
    _refuse_nul(emission.payload, "payload")
    _refuse_nul(source, "source")
    graph = load_graph_of(workflow_id)
    nodes = [n for n in graph.nodes if n.kind is NodeKind.SIGNAL and n.signal == emission.signal]
    if not nodes:
        raise DefinitionError(
            f"workflow {workflow_id!r} declares no signal {emission.signal!r}",
            signal=emission.signal,
        )
    digest = hashlib.sha256(
        canonical_json(emission.signal) + b"\0" + payload_bytes + b"\0" + source_bytes
    ).hexdigest()
    result = signal_emit(
        workflow_id=workflow_id,
        signal=emission.signal,
        idempotency_key=key,
        payload=emission.payload,
        source=source,
        content_hash=digest,
        signal_job_ids=[n.job_id for n in nodes],
    )
    return SignalReceipt(len(nodes), result.promoted, result.inserted, _record(result.record))


def emit_signal(workflow_id: str, name: str) -> SignalReceipt:
    """Name-only emission: null payload, ``{}`` source, key ``legacy:{name}``."""
    return emit_signal_with(workflow_id, SignalEmission(name, f"legacy:{name}", None, {}))


def list_signals(
    workflow_id: str, before: int | None = None, limit: int = 100
) -> list[SignalRecord]:
    """Newest first; at most the latest 100 are kept per workflow."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise DefinitionError(f"limit must be an integer between 1 and {MAX_PAGE}")
    if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
        raise DefinitionError(f"before must be an emission id (an integer), got {before!r}")
    load_graph_of(workflow_id)
    return [_record(row) for row in signal_list(workflow_id, before=before, limit=limit)]

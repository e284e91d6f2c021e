"""``ctx.log``: an attempt's own log lines, held in memory until the attempt's outcome is
written, then saved with it (``store.attempt_logs``).

Pure bookkeeping, no Django and no I/O: a handler may log in a tight loop, so an entry is
made and bounded here in one step and nothing is written until the outcome is. The bounds
are the reference's: at most :data:`MAX_ENTRIES` entries per attempt (the newest are kept,
the older ones counted in ``dropped``), each at most :data:`MAX_ENTRY_BYTES` of JSON with
at most :data:`MAX_FIELDS` keyword fields. Whatever is cut sets the entry's ``truncated``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from typing import Any

from headgate_django.kernel.storable import (
    MAX_JSON_DEPTH,
    nested_deeper_than,
    storable_json,
    storable_text,
)

MAX_ENTRIES = 100
MAX_ENTRY_BYTES = 2048
MAX_FIELDS = 32
#: Levels in increasing severity; a reader's ``level`` filter keeps that one and above.
LEVELS = ("debug", "info", "warning", "error")


def _jsonable(value: Any) -> Any:
    """``value`` if every database can store it as JSON as it is, else its ``repr`` (a
    handler's object, ``nan``, a list holding a NUL or nested too deep); a string is kept with what cannot be
    stored replaced (:func:`storable_text`)."""
    if isinstance(value, str):
        return storable_text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if nested_deeper_than(value, MAX_JSON_DEPTH):
        return storable_text(repr(value))
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return storable_text(repr(value))
    return value if storable_json(text) else storable_text(repr(value))


def _size(entry: dict[str, Any]) -> int:
    return len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode())


def _fit(entry: dict[str, Any]) -> dict[str, Any]:
    """Cut ``entry`` to :data:`MAX_ENTRY_BYTES`: the message first, then the last fields."""
    excess = _size(entry) - MAX_ENTRY_BYTES
    if excess <= 0:
        return entry
    entry["truncated"] = True
    message: str = entry["message"]
    encoded = message.encode()
    keep = max(0, len(encoded) - excess - 3)  # room for the ellipsis (3 bytes in UTF-8)
    entry["message"] = encoded[:keep].decode(errors="ignore") + "…"
    fields: dict[str, Any] = entry["fields"]
    while fields and _size(entry) > MAX_ENTRY_BYTES:
        fields.pop(next(reversed(fields)))
    return entry


def make_entry(level: str, message: object, fields: dict[str, Any], at_ms: int) -> dict[str, Any]:
    """One bounded entry: ``{level, at_ms, message, fields, truncated}``."""
    truncated = len(fields) > MAX_FIELDS
    kept = {storable_text(str(k)): _jsonable(v) for k, v in list(fields.items())[:MAX_FIELDS]}
    entry = {
        "level": level,
        "at_ms": at_ms,
        "message": storable_text(str(message)),
        "fields": kept,
        "truncated": truncated,
    }
    return _fit(entry)


class AttemptLog:
    """What ``ctx.log`` is: ``debug``/``info``/``warning``/``error(message, **fields)``.

    Thread-safe, as a handler may log from threads it starts. The time of an entry is the
    worker's clock: it orders lines for a reader and decides nothing.
    """

    def __init__(self) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=MAX_ENTRIES)
        self._count = 0
        self._lock = threading.Lock()

    def _add(self, level: str, message: object, fields: dict[str, Any]) -> None:
        entry = make_entry(level, message, fields, int(time.time() * 1000))
        with self._lock:
            self._entries.append(entry)
            self._count += 1

    def debug(self, message: object, **fields: Any) -> None:
        self._add("debug", message, fields)

    def info(self, message: object, **fields: Any) -> None:
        self._add("info", message, fields)

    def warning(self, message: object, **fields: Any) -> None:
        self._add("warning", message, fields)

    def error(self, message: object, **fields: Any) -> None:
        self._add("error", message, fields)

    def record(self, attempt: int) -> dict[str, Any] | None:
        """What the store saves with the outcome; None if nothing was logged."""
        with self._lock:
            if not self._count:
                return None
            entries = list(self._entries)
            dropped = self._count - len(entries)
        return {"attempt": attempt, "entries": entries, "dropped": dropped}


def at_least(entries: list[dict[str, Any]], level: str) -> list[dict[str, Any]]:
    """The entries of ``level`` and above (``ValueError`` for an unknown level)."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: one of {', '.join(LEVELS)}")
    floor = LEVELS.index(level)
    return [e for e in entries if LEVELS.index(e.get("level", "info")) >= floor]

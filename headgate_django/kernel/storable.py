"""Values every supported database stores alike as JSON.

MariaDB's ``JSON_VALID`` refuses lists and objects nested 32 deep (:data:`MAX_JSON_DEPTH`).
Two kinds of character are valid in a Python string and in JSON text, yet not storable
everywhere: NUL (U+0000), which PostgreSQL refuses in ``text`` and as ``\\u0000`` in
``jsonb``, and an unpaired surrogate, which no driver can encode as UTF-8. A value holding
either fails its write with a database (or encoding) error on some backends only. What a
handler hands the store (its result, its error message, its log lines) is checked or
cleaned here first, so the same value behaves the same on every database and one bad value
cannot fail a write that carries other jobs' outcomes too.
"""

from __future__ import annotations

import re
from typing import Any

#: How deep lists and objects may nest in a value the store keeps as JSON (a durable
#: input, a signal's payload…). MariaDB's ``JSON_VALID`` refuses 32 levels, and the store
#: wraps a value in a few levels of its own (a history event's payload, the signals a new
#: run carries); 24 leaves room for those, holds on every database alike, and keeps what
#: is kept walkable by every reader (the console, replay).
MAX_JSON_DEPTH = 24


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and dicts in ``value`` nest more than ``limit`` deep, found without
    recursion: the value may be nested too deeply for any recursive walk."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list | tuple):
            if depth == limit:
                return True
            stack.extend((child, depth + 1) for child in item)
    return False


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# In JSON text a backslash inside a string is itself escaped (``\\``), so an escape
# ``\u0000`` is one preceded by an even run of backslashes.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def holds_unstorable(text: str) -> bool:
    """Whether ``text`` holds a NUL or an unpaired surrogate, which not every database keeps
    (PostgreSQL refuses a NUL in text and in jsonb)."""
    return _UNSTORABLE.search(text) is not None


def storable_text(text: str) -> str:
    """``text`` with each NUL and unpaired surrogate replaced by U+FFFD (for diagnostics:
    an error message, a traceback, a log line, which are kept rather than refused)."""
    return _UNSTORABLE.sub("\ufffd", text) if holds_unstorable(text) else text


def storable_json(text: str) -> bool:
    """Whether JSON text, as ``json.dumps(..., ensure_ascii=False)`` writes it, holds no
    string with a NUL or an unpaired surrogate."""
    if _SURROGATE.search(text):
        return False
    return "\\u0000" not in text or _NUL_ESCAPE.search(text) is None

"""Extension points the upper layers register into, so ``store`` never imports them.

``ON_FINISH`` callbacks run inside the transaction that moves jobs out of ``running``,
with ``(cursor, connection, job_ids)``; the workflow layer uses it to wake a coordinator
in the same commit as its child's completion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ON_FINISH: list[Callable[[Any, Any, set[str]], None]] = []

#: Run inside the eviction transaction with ``(cursor, connection, job_ids)`` before the
#: rows are deleted (workflows keep completion evidence of evicted children).
BEFORE_EVICT: list[Callable[[Any, Any, Any], None]] = []

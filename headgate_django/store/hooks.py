"""Extension points the upper layers register into, so ``store`` never imports them.

``ON_FINISH`` callbacks run inside the transaction that moves workflow children out of
``running`` (or cancels them), with ``(cursor, connection, workflow_ids)``; the workflow
layer uses it to wake the coordinators in the same commit as their children's outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ON_FINISH: list[Callable[[Any, Any, set[str]], None]] = []

"""Extension points the upper layers register into, so ``store`` never imports them.

``ON_FINISH`` callbacks run inside the transaction that moves workflow children out of
``running`` (or cancels them), with ``(cursor, connection, workflow_ids, job_ids)``: the
workflows those jobs belong to, and the jobs themselves. The workflow layer uses it to wake
the coordinators in the same commit as their children's outcome, and the links waiting for
a child workflow in the same commit as that child's coordinator finishing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ON_FINISH: list[Callable[[Any, Any, set[str], set[str]], None]] = []

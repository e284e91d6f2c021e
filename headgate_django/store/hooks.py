"""Extension points the upper layers register into, so ``store`` never imports them.

``ON_FINISH`` callbacks run inside the transaction that moves workflow children out of
``running`` (or cancels them), with ``(cursor, connection, workflow_ids, job_ids)``: the
workflows those jobs belong to, and the jobs themselves. The workflow layer uses it to wake
the coordinators in the same commit as their children's outcome, and the links waiting for
a child workflow in the same commit as that child's coordinator finishing.

``ON_ARCHIVE`` callbacks run inside the transaction that archives jobs for good (out of
attempts, skipped, past their deadline) or marks them undecodable, with ``(cursor,
connection, deaths)``, one :class:`Death` per job. Death handlers
(:mod:`headgate_django.deaths`) enqueue their call in that same commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

ON_FINISH: list[Callable[[Any, Any, set[str], set[str]], None]] = []


class Death(NamedTuple):
    """A job that will not run again by itself, and why: ``attempts_exhausted``,
    ``skipped``, ``deadline_exceeded`` or ``undecodable``; ``error`` is its last one."""

    job_id: str
    kind: str
    queue: str
    reason: str
    error: str


ON_ARCHIVE: list[Callable[[Any, Any, list[Death]], None]] = []


def after_archive(cursor: Any, conn: Any, deaths: list[Death]) -> None:
    """Run the ``ON_ARCHIVE`` hooks for ``deaths``, in the caller's transaction."""
    if deaths:
        for hook in ON_ARCHIVE:
            hook(cursor, conn, deaths)

"""Fields that runtimes built on the worker add to its periodic one-line status.

The durable runtime uses it to say which workflow and Operation code this worker lacks, so
an operator watching the status sees work waiting for another deploy, not only the log.
"""

from __future__ import annotations

from collections.abc import Callable

#: Each returns one ``key=value`` field, or None when it has nothing to say.
STATUS_FIELDS: list[Callable[[], str | None]] = []


def status_line(base: str) -> str:
    """``base`` (the worker's counters) followed by every field that has something to say."""
    return " ".join([base, *filter(None, (field() for field in STATUS_FIELDS))])

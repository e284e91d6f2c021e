"""Fields that runtimes built on the worker add to its periodic one-line status.

The durable runtime uses it to say which workflow and Operation code this worker lacks, so
an operator watching the status sees work waiting for another deploy, not only the log.
"""

from __future__ import annotations

from collections.abc import Callable

#: Each returns one ``key=value`` field, or None when it has nothing to say.
STATUS_FIELDS: list[Callable[[], str | None]] = []


def status_line(base: str, *own: str | None) -> str:
    """``base`` (the worker's counters), the worker's ``own`` fields and every field of
    :data:`STATUS_FIELDS`, each only when it has something to say."""
    fields = [*own, *(field() for field in STATUS_FIELDS)]
    return " ".join([base, *filter(None, fields)])

"""``enqueue``: the one producer entry point for envelopes, lists and prepared batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, Protocol, runtime_checkable

from headgate_django.envelope import Envelope


@runtime_checkable
class Batch(Protocol):
    """Anything that knows its envelopes: a prepared workflow, graft or bundle."""

    @property
    def envelopes(self) -> list[Envelope]: ...


@cache
def _job_insert_many() -> Callable[..., list[str]]:
    """The store's insert, imported on first use: the store needs the app registry, which is
    not ready while Django imports this package (an import statement per call cost a single
    enqueue more than the lookup through this cache)."""
    from headgate_django.store import job_insert_many

    return job_insert_many


def enqueue(
    batch_or_envelopes: Envelope | Batch | Iterable[Envelope], using: str = "default"
) -> list[str]:
    """Store jobs atomically and return their ids, in order.

    Runs inside the caller's ``transaction.atomic()`` when there is one, so the jobs exist
    exactly when the caller's own rows do: no job for a rolled-back order, and no order
    whose job was lost between two commits.
    """
    job_insert_many = _job_insert_many()
    items: Any = batch_or_envelopes
    if isinstance(items, Envelope):  # first: the commonest call, and the cheapest test
        return job_insert_many([items], using=using)
    if hasattr(items, "enqueue_with"):
        # A batch with rules of its own (a graft must find its workflow still running).
        return list(items.enqueue_with(using=using))
    envelopes = list(items.envelopes) if isinstance(items, Batch) else list(items)
    return job_insert_many(envelopes, using=using)

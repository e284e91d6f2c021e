"""``enqueue``: the one producer entry point for envelopes, lists and prepared batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from headgate_django import tracing
from headgate_django.envelope import Envelope

if TYPE_CHECKING:
    from headgate_django.store.unique_modes import Inserted


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
    if tracing.ENABLED and (carrier := tracing.carrier()) is not None and tracing.active():
        return _enqueue_traced(items, carrier, using)
    if isinstance(items, Envelope):  # first: the commonest call, and the cheapest test
        return job_insert_many([items], using=using)
    if hasattr(items, "enqueue_with"):
        # A batch with rules of its own (a graft must find its workflow still running).
        return list(items.enqueue_with(using=using))
    envelopes = list(items.envelopes) if isinstance(items, Batch) else list(items)
    return job_insert_many(envelopes, using=using)


def enqueue_one(envelope: Envelope, using: str = "default") -> Inserted:
    """Store one job and say what became of it: ``Inserted(id, replaced)``.

    ``enqueue`` returns the same id; this also tells a new job (``replaced=False``) from a
    waiting holder of the envelope's ``unique_key`` that took its values instead
    (``unique_replace``, ``unique_debounce``: ``replaced=True``, ``id`` the holder's).
    """
    from headgate_django.store.unique_modes import job_insert_one

    return job_insert_one(envelope, using=using)


def _enqueue_traced(items: Any, carrier: dict[str, str], using: str) -> list[str]:
    """Enqueue under a current span: the jobs carry its trace context (a graft keeps its
    own ``enqueue_with`` rules, and its nodes are given the context in its transaction)."""
    from headgate_django.store.tracing import batch_insert_traced, job_insert_traced

    if hasattr(items, "enqueue_with"):
        return batch_insert_traced(items.enqueue_with, using=using)
    if isinstance(items, Envelope):
        envelopes = [items]
    else:
        envelopes = list(items.envelopes) if isinstance(items, Batch) else list(items)
    return job_insert_traced(envelopes, carrier, using=using)

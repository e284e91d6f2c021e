"""Admin list filters whose choices never come from ``SELECT DISTINCT`` over a table.

Django's default filter for a plain column lists its values with a ``DISTINCT`` over the
whole table: on a job table of millions, a scan and a sort before the page renders. The
queues and kinds offered here are the ones this process knows (the registered tasks, the
queues an operator switched); any other value still filters through the URL
(``?queue=…``), and the search box takes a kind's prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

from django.contrib.admin.filters import AllValuesFieldListFilter, FieldListFilter

from headgate_django.registry import registered_kinds, registered_queues


class KnownValuesFilter(AllValuesFieldListFilter):
    """:class:`AllValuesFieldListFilter` with its choices from :attr:`known` instead, read
    when the filter is drawn (the admin also makes one to learn its parameters' names)."""

    known: Callable[[], Iterable[str]] = staticmethod(lambda: ())

    def __init__(
        self, field: Any, request: Any, params: Any, model: Any, model_admin: Any, field_path: str
    ) -> None:
        self.lookup_kwarg = field_path
        self.lookup_kwarg_isnull = f"{field_path}__isnull"
        self.lookup_val = params.get(self.lookup_kwarg)
        self.lookup_val_isnull = None
        self.empty_value_display = model_admin.get_empty_value_display()
        FieldListFilter.__init__(self, field, request, params, model, model_admin, field_path)

    @cached_property
    def lookup_choices(self) -> list[str]:  # type: ignore[override]
        return sorted({*self.known(), *(self.lookup_val or [])})


def _known_queues() -> list[str]:
    # Imported here: the admin, and with it this module, loads in every worker process.
    from headgate_django.store.stats import switched_queues

    return [*registered_queues(), *switched_queues()]


class QueueFilter(KnownValuesFilter):
    known = staticmethod(_known_queues)


class KindFilter(KnownValuesFilter):
    known = staticmethod(registered_kinds)

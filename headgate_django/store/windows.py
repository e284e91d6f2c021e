"""Bounded windows: a list whose filters no index serves, read among the newest rows only.

A console list filtered on a column no index leads with (the jobs of one queue, say) has
one plan left: walk the table in the list's order and test every row. When matches are
common the walk stops after a page; when they are rare, or absent, it reads every row of
a table of millions, for the page and again for the pager's capped count, and the live
job list repeats it every second. Another index would serve that filter, but the job
table's indexes are paid for by every enqueue, claim and ack; a window costs nothing on
the write path. So such a list is read among the newest :data:`WINDOW` rows only: one
read of the ordering index finds the row at that depth, and the filter becomes a range
of that index, whatever the filter matches.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

#: How many of a table's newest rows a list no index serves reads.
WINDOW = 50_000


def newest_window(queryset: QuerySet[Any], *, order: str) -> QuerySet[Any] | None:
    """``queryset`` restricted to the first :data:`WINDOW` rows of its whole table in the
    order ``order`` (a field, ``-`` first for newest first), or ``None`` when the table
    holds no more rows than that (the window would be all of it).

    The edge is read from the table, not from ``queryset``: its filters are the reason
    the list needs a window. A tie at the edge keeps every row of that value, so the
    window may be a few rows wider than :data:`WINDOW`, never narrower."""
    field = order.removeprefix("-")
    table = queryset.model._default_manager.using(queryset.db)
    edge = list(table.order_by(order).values_list(field, flat=True)[WINDOW - 1 : WINDOW])
    if not edge:
        return None
    bound = "gte" if order.startswith("-") else "lte"
    return queryset.filter(**{f"{field}__{bound}": edge[0]})

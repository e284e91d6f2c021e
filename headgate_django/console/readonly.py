"""The read-only ModelAdmin base and the small display helpers every headgate admin uses.

The admin is a window, not a control panel: operators act through the API or the Python
verbs, which keep the state machine's rules (fencing, history, wake-ups) that a raw row
edit would bypass. So no admin here adds, changes or deletes, bulk actions are off, and
every request other than GET/HEAD is refused with 403, as docs/console.md promises.

User data follows :mod:`headgate_django.visibility`: the base takes the model's private
columns out of every form and page, and, without the reveal permission, also the
subclass's displays of them (``private``), showing one notice in their place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.filters import FieldListFilter
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, PermissionDenied
from django.core.paginator import Paginator
from django.db.models.constants import LOOKUP_SEP
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from headgate_django.console import links
from headgate_django.console.access import storable
from headgate_django.console.groups import DURABLE_PREFIX
from headgate_django.envelope import nested_deeper_than
from headgate_django.visibility import may_see_payloads, private_fields

#: Longer JSON is cut: a detail page must stay light even for a 32 MiB result.
MAX_JSON_CHARS = 20_000
#: Deeper JSON is not shown: the indenting encoder recurses once per level, and the API
#: stores values nested almost as deep as Python can recurse (the page would be a 500).
MAX_SHOWN_DEPTH = 100
#: The most rows an admin list counts (see :class:`CappedPaginator`).
COUNT_CAP = 10_000
HIDDEN = "hidden — needs the “Can view job payloads” permission"
#: The query parameter that lifts a list's window (:class:`WindowedChangeList`).
WHOLE_VAR = "whole"
#: The parameters of a ``date_hierarchy`` drill-down.
DATE_PARTS = ("year", "month", "day")
READ_METHODS = ("GET", "HEAD")


def refuse_writes(request: HttpRequest) -> None:
    """403 for anything but a read: the console changes nothing, whatever is posted."""
    if request.method not in READ_METHODS:
        raise PermissionDenied("the headgate console is read-only")


def refuse_unstorable(request: HttpRequest) -> None:
    """404 for a path, 400 for a query, holding NUL: nothing stored has it, and PostgreSQL
    would refuse the lookup with an error (a 500) instead of finding nothing."""
    if not storable(request.path):
        raise Http404("no headgate object has NUL in its id")
    if not storable(*(text for key, values in request.GET.lists() for text in (key, *values))):
        raise BadRequest("a query parameter holds NUL")


class CappedPaginator(Paginator):
    """Counts at most :data:`COUNT_CAP` + 1 rows: the admin counts the filtered list for
    its pager, and a full ``COUNT(*)`` of a state or queue of millions reads them all.
    Past the cap the pager stops at the page that holds row 10,001."""

    @cached_property
    def count(self) -> int:
        rows: Any = self.object_list  # the changelist's queryset
        return int(rows.order_by()[: COUNT_CAP + 1].count())


class IndexedSortChangeList(ChangeList):
    """A changelist that sorts only by the columns its admin's ``sortable_by`` names.

    Django's own takes ``sortable_by`` for the header links alone and sorts by any column
    ``?o=`` names that has an ordering field: on a large table, one sorted by a column no
    index serves on every page load. Another column's ``?o=`` is dropped, as Django drops
    an index it does not know, so the page keeps its default order."""

    def get_ordering_field(self, field_name: Any) -> Any:
        if self.sortable_by is not None and field_name not in self.sortable_by:
            return None
        return super().get_ordering_field(field_name)


class WindowedChangeList(IndexedSortChangeList):
    """A changelist that reads only the newest rows (``store.windows``) when its admin says
    no index serves its filters (:meth:`ReadOnlyAdmin.indexed`), and says so above the list
    with a link that lifts the window (``?whole=1``) for an operator who will wait for a
    read of the whole table.

    The window follows the list's default order, so a page of it is the page the whole
    list would show while matches are common; only rare matches beyond it are left out,
    and the notice says where: among the newest rows on a list that shows the newest
    first, among the first in its order on one that sorts by a key ascending (effects by
    job, unique windows by expiry)."""

    #: Set when the list shows a window: the notice, with its link to the whole list.
    window_notice: SafeString | None = None

    def get_filters_params(self, params: Any = None) -> Any:
        lookup_params = super().get_filters_params(params)
        lookup_params.pop(WHOLE_VAR, None)
        return lookup_params

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        from headgate_django.store.windows import WINDOW, newest_window

        queryset = super().get_queryset(request, exclude_parameters)
        filters: dict[str, list[str]] = {}
        for param, values in self.get_filters_params().items():
            filters.setdefault(param.split(LOOKUP_SEP)[0], []).extend(values)
        model_admin: Any = self.model_admin
        if WHOLE_VAR in self.filter_params or model_admin.indexed(filters, self.query.strip()):
            return queryset
        [order, *_] = model_admin.get_ordering(request) or self.lookup_opts.ordering or ["-pk"]
        windowed = newest_window(queryset, order=str(order))
        if windowed is None:  # the table is no larger than the window
            return queryset
        where = "the newest {} {}" if str(order).startswith("-") else "the first {} {} in order"
        self.window_notice = format_html(
            "Showing matches among " + where + " only: no index serves these filters "
            'over the whole table. <a href="{}">Search all {}</a> (reads every row).',
            f"{WINDOW:,}",
            self.opts.verbose_name_plural,
            self.get_query_string({WHOLE_VAR: "1"}),
            self.opts.verbose_name_plural,
        )
        return windowed


class ReadOnlyAdmin(admin.ModelAdmin):
    paginator = CappedPaginator
    actions = None
    # Counting every row of a large table for "N total", or per filter choice, reads them all.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    change_list_template = "headgate_django/admin/change_list.html"
    #: Computed displays that show user data: without the reveal permission they are
    #: replaced by the ``hidden`` notice (the model's private columns never show raw).
    private: tuple[str, ...] = ()
    #: Filters other pages link to, beside the list's own (``list_filter``,
    #: ``date_hierarchy``): with those, the only lookups the changelist takes. Each one
    #: an index serves (see :meth:`lookup_allowed`).
    linked_filters: tuple[str, ...] = ()
    #: Whether an index serves the list's search. Django's ``^`` and ``=`` search fields
    #: compare without case (``UPPER(column)``), which no plain index serves, and it asks
    #: for the fields joined by ``OR``, which one index serves only when every field leads
    #: one: a search for a rare or absent term then reads the whole table, for the page
    #: and for the pager's count. ``False`` reads a searched list in a window. A list
    #: whose ``search_fields`` are all ``field__exact`` or ``field__startswith``, each
    #: leading an index, is searched with case through those indexes instead
    #: (:meth:`get_search_results`).
    search_indexed = True

    class Media:
        css = {"all": ["headgate_django/console/console.css"]}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WindowedChangeList

    def indexed(self, filters: dict[str, list[str]], search: str) -> bool:
        """Whether an index serves this list, in its default order, filtered by ``filters``
        (``{column: values}``) and searched for ``search``: then it reads the whole table,
        else a window of its newest rows (:class:`WindowedChangeList`). Every filter an
        admin offers is served unless it says otherwise here; a search is served unless
        :attr:`search_indexed` says otherwise."""
        return self.search_indexed or not search

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        """With case-sensitive ``search_fields`` (``field__exact``, ``field__startswith``),
        the whole term as an id or an id's prefix, through each field's index
        (``store.index_hints.exact_or_prefix``): an id pasted from a link or a log is found
        however large the table. Django's own search splits the term into words and spells
        a prefix ``LIKE BINARY`` on MySQL/MariaDB, which no index serves."""
        from headgate_django.store.index_hints import INDEXED_LOOKUPS, exact_or_prefix

        term = search_term.strip()
        fields = [str(f) for f in self.get_search_fields(request)]
        if not term or not all(f.rpartition(LOOKUP_SEP)[2] in INDEXED_LOOKUPS for f in fields):
            return super().get_search_results(request, queryset, search_term)
        return queryset.filter(exact_or_prefix(fields, term, using=queryset.db)), False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- every write is refused -------------------------------------------------------
    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # Without this a POSTed action (delete_selected) renders the list again with 200.
        refuse_writes(request)
        refuse_unstorable(request)
        return super().changelist_view(request, extra_context)

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refuse_writes(request)
        refuse_unstorable(request)
        return super().changeform_view(request, *args, **kwargs)

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refuse_writes(request)
        refuse_unstorable(request)
        return super().delete_view(request, *args, **kwargs)

    def history_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refuse_writes(request)
        refuse_unstorable(request)
        return super().history_view(request, *args, **kwargs)

    # -- fields: all read-only, user data only with the reveal permission -------------
    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*(self.exclude or ()), *sorted(private_fields(self.model))]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """Every field and every computed display, so no widget is ever editable."""
        excluded = set(self.get_exclude(request, obj))
        fields = [f.name for f in self.model._meta.fields if f.name not in excluded]
        return [*fields, *self.readonly_fields, "hidden"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if self.fields:
            return self.fields
        return [f for f in self.get_readonly_fields(request, obj) if f != "hidden"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fieldsets = super().get_fieldsets(request, obj)
        if may_see_payloads(request.user):
            return list(fieldsets)
        return [
            (title, {**opts, "fields": self._public(opts["fields"])}) for title, opts in fieldsets
        ]

    def _public(self, fields: Sequence[Any]) -> list[Any]:
        kept = [f for f in fields if f not in self.private]
        return [*kept, "hidden"] if len(kept) < len(fields) else kept

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)
        if may_see_payloads(request.user):
            return shown
        return [f for f in shown if f not in self.private]

    def lookup_allowed(self, lookup: str, value: str, request: Any = None) -> bool:
        """Only the filters the pages offer (:meth:`offered_filters`), and never one on
        user data, for anyone: counting the rows that match a guessed value would read it
        without showing it.

        The admin would take any other lookup on a column as a filter: ``?errors__isnull=1``,
        ``?kind__icontains=x``, a regular expression (on SQLite run by Python's
        backtracking ``re`` in the web process), a path into a JSON document. No index
        serves them, so one that matches few rows reads the whole table (millions of jobs)
        for the pager's capped count and the page. Refused with 400, as Django refuses a
        lookup it does not allow."""
        if lookup in self.offered_filters(request) and (
            lookup.split(LOOKUP_SEP)[0] not in private_fields(self.model)
        ):
            return True
        raise DisallowedModelAdminLookup(f"filtering on {lookup!r} is not allowed")

    def offered_filters(self, request: Any) -> set[str]:
        """The query parameters of the list's filters (their choices' links), of its date
        hierarchy, and :attr:`linked_filters`.

        ``__isnull`` only on a column that can be null: a filter offers "(None)" only
        there, and on a column that never is, nothing serves the search for a null."""
        offered = {*self.linked_filters}
        if self.date_hierarchy:
            offered.update(f"{self.date_hierarchy}__{part}" for part in DATE_PARTS)
        for item in self.get_list_filter(request):
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                offered.add(str(item.parameter_name))
                continue
            path, make = item if isinstance(item, list | tuple) else (item, FieldListFilter.create)
            field = get_fields_from_path(self.model, str(path))[-1]
            spec: Any = make(field, request, {}, self.model, self, field_path=str(path))  # type: ignore[operator]
            offered.update(
                str(p)
                for p in spec.expected_parameters()
                if p and (field.null or not p.endswith("__isnull"))
            )
        return offered

    @admin.display(description="user data")
    def hidden(self, obj: Any) -> str:
        return HIDDEN

    @property
    def site_name(self) -> str:
        return self.admin_site.name


def pretty_json(value: Any) -> SafeString | str:
    if value is None or value == {} or value == []:
        return "—"
    if nested_deeper_than(value, MAX_SHOWN_DEPTH):
        return f"(too deeply nested to display: more than {MAX_SHOWN_DEPTH} levels)"
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > MAX_JSON_CHARS:
        text = text[:MAX_JSON_CHARS] + f"\n… ({len(text) - MAX_JSON_CHARS} more characters)"
    return format_html('<pre class="hg-json">{}</pre>', text)


def pretty_bytes(raw: bytes | memoryview | None) -> SafeString | str:
    data = bytes(raw or b"")
    if not data:
        return "—"
    try:
        return pretty_json(json.loads(data))
    except ValueError:
        return f"{len(data)} bytes (not JSON)"
    except RecursionError:
        return f"{len(data)} bytes (too deeply nested to display)"


def link(url: str | None, text: str) -> SafeString | str:
    return format_html('<a href="{}">{}</a>', url, text) if url else text


def job_link(job_id: str | None, site_name: str) -> SafeString | str:
    if not job_id:
        return "—"
    return link(links.job_url_builder(site_name)(job_id), job_id)


def workflow_link(
    workflow_id: str | None,
    site_name: str,
    job_id: str | None = None,
    shorten: Callable[[str], str] = str,
) -> Any:
    """A link to the live page of a DAG workflow or a durable execution (by job group);
    ``shorten`` makes the link's text (the job list shortens long ids)."""
    if not workflow_id:
        return "—"
    if workflow_id.startswith(DURABLE_PREFIX):
        execution_id = workflow_id[len(DURABLE_PREFIX) :]
        url = links.execution_url(execution_id, site_name)
        return link(url, f"execution {shorten(execution_id)}")
    url = links.workflow_url(workflow_id, site_name)
    if url and job_id:
        url += "?" + urlencode({"job": job_id})
    return link(url, shorten(workflow_id))

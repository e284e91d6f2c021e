"""The read-only ModelAdmin base and the small display helpers every headgate admin uses.

The admin is a window, not a control panel: operators act through the API or the Python
verbs, which keep the state machine's rules (fencing, history, wake-ups) that a raw row
edit would bypass. So no admin here adds, changes or deletes, and bulk actions are off.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.paginator import Paginator
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from headgate_django.console import access, links
from headgate_django.console.groups import DURABLE_PREFIX

#: Longer JSON is cut: a detail page must stay light even for a 32 MiB result.
MAX_JSON_CHARS = 20_000
#: The most rows an admin list counts (see :class:`CappedPaginator`).
COUNT_CAP = 10_000
HIDDEN = "hidden — needs the “Can view job payloads” permission"


class CappedPaginator(Paginator):
    """Counts at most :data:`COUNT_CAP` + 1 rows: the admin counts the filtered list for
    its pager, and a full ``COUNT(*)`` of a state or queue of millions reads them all.
    Past the cap the pager stops at the page that holds row 10,001."""

    @cached_property
    def count(self) -> int:
        rows: Any = self.object_list  # the changelist's queryset
        return int(rows.order_by()[: COUNT_CAP + 1].count())


class ReadOnlyAdmin(admin.ModelAdmin):
    paginator = CappedPaginator
    actions = None
    # Counting every row of a large table for "N total", or per filter choice, reads them all.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100

    class Media:
        css = {"all": ["headgate_django/console/console.css"]}

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """Every field and every computed display, so no widget is ever editable."""
        excluded = set(self.exclude or ())
        fields = [f.name for f in self.model._meta.fields if f.name not in excluded]
        return [*fields, *self.readonly_fields]

    @property
    def site_name(self) -> str:
        return self.admin_site.name


def pretty_json(value: Any) -> SafeString | str:
    if value is None or value == {} or value == []:
        return "—"
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


def revealed(request: HttpRequest) -> bool:
    return access.may_see_payloads(request.user)


def link(url: str | None, text: str) -> SafeString | str:
    return format_html('<a href="{}">{}</a>', url, text) if url else text


def job_link(job_id: str | None, site_name: str) -> SafeString | str:
    if not job_id:
        return "—"
    return link(links.job_url_builder(site_name)(job_id), job_id)


def workflow_link(workflow_id: str | None, site_name: str, job_id: str | None = None) -> Any:
    """A link to the live page of a DAG workflow or a durable execution (by job group)."""
    if not workflow_id:
        return "—"
    if workflow_id.startswith(DURABLE_PREFIX):
        execution_id = workflow_id[len(DURABLE_PREFIX) :]
        return link(links.execution_url(execution_id, site_name), f"execution {execution_id}")
    url = links.workflow_url(workflow_id, site_name)
    if url and job_id:
        url += "?" + urlencode({"job": job_id})
    return link(url, workflow_id)

"""Read-only admins of the durable runtime (executions, history, signal inbox) and of the
API's idempotency records. Inputs, results and payloads need the reveal permission."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.http import urlencode

from headgate_django.console import links
from headgate_django.console.readonly import (
    HIDDEN,
    ReadOnlyAdmin,
    link,
    pretty_bytes,
    pretty_json,
    revealed,
)
from headgate_django.models import Execution, HistoryEvent, IdempotencyRecord, SignalInbox


def _execution_link(execution_id: str, site_name: str) -> Any:
    return link(links.execution_url(execution_id, site_name), execution_id)


class _PrivateFieldsAdmin(ReadOnlyAdmin):
    """Shows ``private`` fields pretty-printed with the reveal permission, else a notice."""

    private: tuple[str, ...] = ()

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [f.name for f in self.model._meta.fields if f.name not in self.private]
        shown = [f"{name}_view" for name in self.private] if revealed(request) else ["hidden"]
        return [*fields, *self.readonly_fields, *shown]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_readonly_fields(request, obj)

    @admin.display(description="payload and results")
    def hidden(self, obj: Any) -> str:
        return HIDDEN


@admin.register(Execution)
class ExecutionAdmin(_PrivateFieldsAdmin):
    list_display = ["id", "name", "version", "state", "task_queue", "created_at", "timeline"]
    # Newest first through (created_at, id); name and queue by search, not DISTINCT choices.
    list_filter = ["state"]
    search_fields = ["=id", "^name", "=business_idempotency_key"]
    readonly_fields = ["timeline", "history_link"]
    private = ("input", "result", "meta")

    @admin.display(description="live timeline")
    def timeline(self, obj: Execution) -> Any:
        return link(links.execution_url(obj.id, self.site_name), "timeline")

    @admin.display(description="history events")
    def history_link(self, obj: Execution) -> Any:
        url = reverse("admin:headgate_django_historyevent_changelist", current_app=self.site_name)
        query = urlencode({"execution__id__exact": obj.id})
        return link(f"{url}?{query}", f"{obj.last_seq} events")

    @admin.display(description="input")
    def input_view(self, obj: Execution) -> Any:
        return pretty_json(obj.input)

    @admin.display(description="result")
    def result_view(self, obj: Execution) -> Any:
        return pretty_json(obj.result)

    @admin.display(description="meta")
    def meta_view(self, obj: Execution) -> Any:
        return pretty_json(obj.meta)

    def get_urls(self) -> list[Any]:
        # Imported here: the console views pull in the graph layout, CEL and snapshot
        # code, which every process that merely sets Django up (a worker) would load.
        from headgate_django.console.urls import execution_console_urls

        return execution_console_urls(self.admin_site) + super().get_urls()


@admin.register(HistoryEvent)
class HistoryEventAdmin(_PrivateFieldsAdmin):
    list_display = ["execution_page", "seq", "type", "at"]
    search_fields = ["=execution__id"]
    readonly_fields = ["execution_page"]
    private = ("payload",)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("payload")

    @admin.display(description="execution", ordering="execution_id")
    def execution_page(self, obj: HistoryEvent) -> Any:
        return _execution_link(obj.execution_id, self.site_name)

    @admin.display(description="payload")
    def payload_view(self, obj: HistoryEvent) -> Any:
        return pretty_json(obj.payload)


@admin.register(SignalInbox)
class SignalInboxAdmin(_PrivateFieldsAdmin):
    list_display = ["execution_page", "name", "message_id", "seq", "received_at"]
    ordering = ["-id"]
    search_fields = ["=workflow__id", "=message_id"]
    readonly_fields = ["execution_page"]
    private = ("payload",)

    @admin.display(description="execution", ordering="workflow_id")
    def execution_page(self, obj: SignalInbox) -> Any:
        return _execution_link(obj.workflow_id, self.site_name)

    @admin.display(description="payload")
    def payload_view(self, obj: SignalInbox) -> Any:
        return pretty_json(obj.payload)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(_PrivateFieldsAdmin):
    """Stored API responses: they may hold job payloads, so bodies need the permission."""

    list_display = ["key", "user", "method", "path", "status_code", "created_at", "expires_at"]
    search_fields = ["=key", "=user"]
    ordering = ["-id"]
    private = ("response_body",)

    @admin.display(description="response body")
    def response_body_view(self, obj: IdempotencyRecord) -> Any:
        return pretty_bytes(obj.response_body)

"""Read-only admins of the durable runtime (executions, history, finished runs and their
histories, signal inbox) and of the API's idempotency records. Inputs, results and payloads are user data (``private``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.http import HttpRequest
from django.urls import reverse
from django.utils.http import urlencode

from headgate_django.console import joblist, links
from headgate_django.console.readonly import ReadOnlyAdmin, link, pretty_bytes, pretty_json
from headgate_django.models import (
    Execution,
    ExecutionRun,
    HistoryEvent,
    IdempotencyRecord,
    RunHistoryEvent,
    SignalInbox,
)


def _execution_link(execution_id: str, site_name: str) -> Any:
    return link(links.execution_url(execution_id, site_name), execution_id)


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyAdmin):
    # Short ids, badges and compact instants (console/joblist.py), so the timeline link
    # fits a 1366 px screen.
    list_display = [
        "execution_id",
        "name",
        "version",
        "state_badge",
        "task_queue",
        "created",
        "timeline",
    ]
    list_display_links = None
    # Newest first through (created_at, id); name and queue by search, not DISTINCT choices.
    # Sorted by id too (the primary key); by state or creation, ties are broken by the
    # id's descending order, which no index has in an ascending sort: the table is sorted.
    list_filter = ["state"]
    sortable_by = ["execution_id"]
    search_fields = ["=id", "^name", "=business_idempotency_key"]
    search_indexed = False
    readonly_fields = ["timeline", "history_link", "input_view", "result_view", "meta_view"]
    private = ("input_view", "result_view", "meta_view")

    def indexed(self, filters: dict[str, list[str]], search: str) -> bool:
        """The state indexes order by update and finish, not creation: newest first, one
        state is found by a walk of the creation index that reads every execution when
        the state is rare, so that list is read in a window."""
        return "state" not in filters and super().indexed(filters, search)

    @admin.display(description="execution", ordering="id")
    def execution_id(self, obj: Execution) -> Any:
        url = reverse(
            "admin:headgate_django_execution_change",
            args=[quote(obj.id)],
            current_app=self.site_name,
        )
        return joblist.id_cell(obj.id, url)

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Execution) -> Any:
        return joblist.state_cell(obj.state)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Execution) -> Any:
        return joblist.time_cell(obj.created_at)

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
class HistoryEventAdmin(ReadOnlyAdmin):
    list_display = ["execution_page", "seq", "type", "at"]
    # By execution and seq, the order of their unique key's index; no other sort has one.
    sortable_by = ()
    # With case, a range of the (execution, seq) key in the list's order; without case,
    # a search read every event of every execution.
    search_fields = ["execution__id__exact"]
    search_help_text = "An execution id, with case."
    linked_filters = ("execution__id__exact",)  # an execution's "N events", by its key
    readonly_fields = ["execution_page", "payload_view"]
    private = ("payload_view",)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("payload")

    @admin.display(description="execution", ordering="execution_id")
    def execution_page(self, obj: HistoryEvent) -> Any:
        return _execution_link(obj.execution_id, self.site_name)

    @admin.display(description="payload")
    def payload_view(self, obj: HistoryEvent) -> Any:
        return pretty_json(obj.payload)


@admin.register(ExecutionRun)
class ExecutionRunAdmin(ReadOnlyAdmin):
    """Runs that ended by continuing as new (the current run is the execution itself)."""

    list_display = ["execution_page", "number", "run_id", "events", "started_at", "finished_at"]
    sortable_by = ()  # by execution and number, the unique key's index
    search_fields = ["=execution__id", "=run_id"]
    search_indexed = False
    readonly_fields = ["execution_page", "history_link", "input_view"]
    private = ("input_view",)

    @admin.display(description="execution", ordering="execution_id")
    def execution_page(self, obj: ExecutionRun) -> Any:
        return _execution_link(obj.execution_id, self.site_name)

    @admin.display(description="history events")
    def history_link(self, obj: ExecutionRun) -> Any:
        url = reverse(
            "admin:headgate_django_runhistoryevent_changelist", current_app=self.site_name
        )
        return link(f"{url}?{urlencode({'run__id__exact': obj.pk})}", f"{obj.events} events")

    @admin.display(description="input")
    def input_view(self, obj: ExecutionRun) -> Any:
        return pretty_json(obj.input)


@admin.register(RunHistoryEvent)
class RunHistoryEventAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "type", "at"]
    sortable_by = ()  # by run and seq, the unique key's index
    list_select_related = ["run"]
    search_fields = ["=run__execution__id", "=run__run_id"]
    # A run id leads no index of the runs, so the search joins every run to its events;
    # a run's own events are its "N events" link, a filter by its key.
    search_indexed = False
    linked_filters = ("run__id__exact",)  # a finished run's "N events", by its key
    readonly_fields = ["payload_view"]
    private = ("payload_view",)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).defer("payload")

    @admin.display(description="payload")
    def payload_view(self, obj: RunHistoryEvent) -> Any:
        return pretty_json(obj.payload)


@admin.register(SignalInbox)
class SignalInboxAdmin(ReadOnlyAdmin):
    list_display = ["execution_page", "name", "message_id", "seq", "received_at"]
    ordering = ["-id"]
    sortable_by = ()  # newest first by primary key, the only order indexed
    search_fields = ["=workflow__id", "=message_id"]
    search_indexed = False
    readonly_fields = ["execution_page", "payload_view"]
    private = ("payload_view",)

    @admin.display(description="execution", ordering="workflow_id")
    def execution_page(self, obj: SignalInbox) -> Any:
        return _execution_link(obj.workflow_id, self.site_name)

    @admin.display(description="payload")
    def payload_view(self, obj: SignalInbox) -> Any:
        return pretty_json(obj.payload)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    """Stored API responses: they may hold job payloads, so bodies need the permission."""

    list_display = ["key", "user", "method", "path", "status_code", "created_at", "expires_at"]
    search_fields = ["=key", "=user"]
    search_indexed = False
    ordering = ["-id"]
    sortable_by = ()  # newest first by primary key, the only order indexed
    readonly_fields = ["response_body_view"]
    private = ("response_body_view",)

    @admin.display(description="response body")
    def response_body_view(self, obj: IdempotencyRecord) -> Any:
        return pretty_bytes(obj.response_body)

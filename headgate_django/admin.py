"""Read-only admin pages for every headgate model, and the console pages hung off them.

Nothing here adds, changes or deletes a row (see :mod:`headgate_django.console.readonly`
for why). User data (payloads, results, checkpoints, signal payloads) is shown only to
holders of ``headgate_django.view_job_payload`` (:mod:`headgate_django.visibility`): each
admin names its displays of it in ``private``.
The console pages (queues, workflows, live graphs, durable timelines) are mounted through
``JobAdmin`` and ``ExecutionAdmin`` so they work on whichever admin site registers them.
Durable and API models are registered in :mod:`headgate_django.console.admin_durable`,
schedules in :mod:`headgate_django.console.admin_schedules`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from headgate_django.console import (
    admin_durable,  # noqa: F401  (registers its admins)
    admin_schedules,  # noqa: F401  (registers its admins)
)
from headgate_django.console.filters import KindFilter, QueueFilter
from headgate_django.console.readonly import (
    ReadOnlyAdmin,
    job_link,
    pretty_bytes,
    pretty_json,
    workflow_link,
)
from headgate_django.models import (
    DutyLease,
    Graft,
    Job,
    Quarantine,
    QueueState,
    SignalEmission,
    WorkflowCheckpoint,
)

INDEX_TEMPLATE = "headgate_django/admin/index.html"


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "kind",
        "queue",
        "state",
        "attempt",
        "crash_attempt",
        "priority",
        "scheduled_at",
        "finalized_at",
        "workflow",
    ]
    # Choices from the state enum and the registered tasks, not DISTINCT over the table;
    # newest first by primary key (ULIDs sort by creation), the only order an index serves
    # for every filter; no date hierarchy, which sorts every row.
    list_filter = ["state", ("queue", QueueFilter), ("kind", KindFilter)]
    # Case-sensitive, as ids and kinds are: "=id" and "^kind" compare UPPER() of the
    # column, which no index serves.
    search_fields = ["id__exact", "kind__startswith"]
    ordering = ["-id"]
    change_list_template = "headgate_django/admin/job_change_list.html"
    readonly_fields = [
        "workflow",
        "error_timeline",
        "checkpoint_view",
        "result_view",
        "payload_view",
    ]
    private = ("checkpoint_view", "result_view", "payload_view")
    _fieldsets: list[tuple[str, list[Any]]] = [
        ("Job", ["id", "kind", "queue", "priority", "schema_version", "fingerprint", "workflow"]),
        ("Uniqueness", ["unique_key"]),
        (
            "Lifecycle",
            ["state", "attempt", "max_attempts", "crash_attempt", "enqueued_at", "scheduled_at"],
        ),
        ("Finish", ["claimed_at", "finalized_at", "retention", "expires_at", "timeout"]),
        ("Lease", ["lease_id", "fence", "lease_expires_at", "claimed_by"]),
        ("Attempts", ["error_timeline"]),
        ("Checkpoint, result and progress", ["checkpoint_view", "result_view", "progress"]),
        ("Payload", ["payload_view"]),
    ]
    fieldsets = [(title, {"fields": fields}) for title, fields in _fieldsets]

    def __init__(self, model: Any, admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        # Link the console from the admin index of whichever site hosts it, unless the
        # project chose its own index template.
        if admin_site.index_template is None:
            admin_site.index_template = INDEX_TEMPLATE

    def get_queryset(self, request: HttpRequest) -> Any:
        # A page of 100 jobs must not drag up to 100 payloads and results along; the
        # detail page loads the few it shows on access.
        heavy = ("payload", "cp_cursor", "result", "errors", "checkpoint", "progress")
        return super().get_queryset(request).defer(*heavy)

    @admin.display(description="payload")
    def payload_view(self, obj: Job) -> SafeString | str:
        return pretty_bytes(obj.payload)

    @admin.display(description="checkpoint")
    def checkpoint_view(self, obj: Job) -> SafeString | str:
        return pretty_json(obj.checkpoint)

    @admin.display(description="result")
    def result_view(self, obj: Job) -> SafeString | str:
        return pretty_json(obj.result)

    @admin.display(description="attempt errors")
    def error_timeline(self, obj: Job) -> SafeString | str:
        if not obj.errors:
            return "—"
        return format_html(
            '<ol class="hg-errors">{}</ol>',
            format_html_join(
                "",
                "<li><b>#{} {}</b> at {}: {}<pre>{}</pre></li>",
                (
                    (
                        e.get("attempt"),
                        e.get("kind"),
                        e.get("at"),
                        e.get("error"),
                        e.get("traceback") or "",
                    )
                    for e in obj.errors
                ),
            ),
        )

    @admin.display(description="workflow")
    def workflow(self, obj: Job) -> Any:
        return workflow_link(obj.workflow_id, self.site_name, obj.id)

    def get_urls(self) -> list[Any]:
        # Imported here: the console views pull in the graph layout, CEL and snapshot
        # code, which every process that merely sets Django up (a worker) would load.
        from headgate_django.console.urls import job_console_urls

        return job_console_urls(self.admin_site) + super().get_urls()


@admin.register(Quarantine)
class QuarantineAdmin(ReadOnlyAdmin):
    list_display = ["fingerprint", "kind", "crash_count", "quarantined_at", "sample_job"]
    search_fields = ["=fingerprint", "^kind"]
    readonly_fields = ["sample_job", "sample_payload_view"]
    private = ("sample_payload_view",)

    @admin.display(description="sample job")
    def sample_job(self, obj: Quarantine) -> Any:
        return job_link(obj.sample_job_id, self.site_name)

    @admin.display(description="sample payload")
    def sample_payload_view(self, obj: Quarantine) -> Any:
        return pretty_bytes(obj.sample_payload)


@admin.register(DutyLease)
class DutyLeaseAdmin(ReadOnlyAdmin):
    list_display = ["name", "holder", "lease_expires_at", "last_run_at"]
    readonly_fields = ["last_result_view"]
    exclude = ["last_result"]

    @admin.display(description="last result")
    def last_result_view(self, obj: DutyLease) -> Any:
        return pretty_json(obj.last_result)


@admin.register(QueueState)
class QueueStateAdmin(ReadOnlyAdmin):
    list_display = ["name", "paused", "updated_at"]


@admin.register(WorkflowCheckpoint)
class WorkflowCheckpointAdmin(ReadOnlyAdmin):
    """One row per workflow that has ticked: the coordinator's durable memory."""

    list_display = [
        "graph",
        "coordinator",
        "revision",
        "generation",
        "outcome",
        "failed",
        "updated_at",
    ]
    list_filter = ["failed"]
    search_fields = ["^workflow_id"]
    readonly_fields = ["graph", "coordinator", "history_table", "completed_view", "grafts_view"]
    exclude = ["history", "completed", "grafts"]

    @admin.display(description="workflow", ordering="workflow_id")
    def graph(self, obj: WorkflowCheckpoint) -> Any:
        return workflow_link(obj.workflow_id, self.site_name)

    @admin.display(description="coordinator job")
    def coordinator(self, obj: WorkflowCheckpoint) -> Any:
        return job_link(obj.coordinator_job_id, self.site_name)

    @admin.display(description="history (newest 256 events)")
    def history_table(self, obj: WorkflowCheckpoint) -> Any:
        if not obj.history:
            return "—"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.get("sequence"),
                    e.get("event"),
                    e.get("node", ""),
                    e.get("revision"),
                    e.get("at_ms", ""),
                )
                for e in obj.history
            ),
        )
        return format_html(
            '<table class="hg-history"><thead><tr><th>#</th><th>event</th><th>node</th>'
            "<th>revision</th><th>at (ms)</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="completion evidence (node → completed at, ms)")
    def completed_view(self, obj: WorkflowCheckpoint) -> Any:
        return pretty_json(obj.completed)

    @admin.display(description="accepted grafts")
    def grafts_view(self, obj: WorkflowCheckpoint) -> Any:
        return pretty_json(obj.grafts)


@admin.register(SignalEmission)
class SignalEmissionAdmin(ReadOnlyAdmin):
    """Signal history: the fact (payload), who sent it (source) and when (store clock)."""

    list_display = ["id", "graph", "signal", "idempotency_key", "emitted_at"]
    search_fields = ["^workflow_id", "=idempotency_key"]
    readonly_fields = ["graph", "payload_view", "source_view"]
    private = ("payload_view", "source_view")

    @admin.display(description="workflow", ordering="workflow_id")
    def graph(self, obj: SignalEmission) -> Any:
        return workflow_link(obj.workflow_id, self.site_name)

    @admin.display(description="payload")
    def payload_view(self, obj: SignalEmission) -> Any:
        return pretty_json(obj.payload)

    @admin.display(description="source")
    def source_view(self, obj: SignalEmission) -> Any:
        return pretty_json(obj.source)


@admin.register(Graft)
class GraftAdmin(ReadOnlyAdmin):
    """Graft requests and their receipts: what was asked and whether it was accepted."""

    list_display = ["receipt", "graph", "revision", "status", "decided_at"]
    ordering = ["-id"]
    search_fields = ["^workflow_id", "=receipt_job_id"]
    readonly_fields = ["graph", "receipt", "nodes_view"]
    exclude = ["nodes"]

    @admin.display(description="workflow", ordering="workflow_id")
    def graph(self, obj: Graft) -> Any:
        return workflow_link(obj.workflow_id, self.site_name)

    @admin.display(description="receipt job", ordering="receipt_job_id")
    def receipt(self, obj: Graft) -> Any:
        return job_link(obj.receipt_job_id, self.site_name)

    @admin.display(description="grafted nodes")
    def nodes_view(self, obj: Graft) -> Any:
        return pretty_json(obj.nodes)

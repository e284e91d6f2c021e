"""Read-only admin pages for every headgate model.

The admin is a window, not a control panel: nothing here adds, changes or deletes a row
(operators act through the API or the Python verbs, which keep the state machine's rules).
Payloads stay hidden unless the user holds ``headgate_django.view_job_payload``.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import path
from django.utils.html import format_html, format_html_join

from headgate_django.models import DutyLease, Job, Quarantine, QueueState


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields] + list(self.readonly_fields)


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
    ]
    list_filter = ["state", "queue", "kind"]
    search_fields = ["id", "kind"]
    date_hierarchy = "enqueued_at"
    list_per_page = 100
    show_full_result_count = False
    exclude = ["payload", "cp_cursor"]
    readonly_fields = ["error_timeline", "workflow_link"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        hidden = {"payload", "cp_cursor", "unique_live"}
        fields = [f.name for f in Job._meta.fields if f.name not in hidden]
        if request.user.has_perm("headgate_django.view_job_payload"):
            fields.append("payload_view")
        return fields + list(self.readonly_fields)

    @admin.display(description="payload")
    def payload_view(self, obj: Job) -> str:
        raw = bytes(obj.payload or b"")
        try:
            return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
        except ValueError:
            return f"{len(raw)} bytes (not JSON)"

    @admin.display(description="attempt errors")
    def error_timeline(self, obj: Job) -> str:
        if not obj.errors:
            return "—"
        return format_html(
            "<ol>{}</ol>",
            format_html_join(
                "",
                "<li><b>#{} {}</b> at {}: {}<pre>{}</pre></li>",
                (
                    (
                        e.get("attempt"),
                        e.get("kind"),
                        e.get("at"),
                        e.get("error"),
                        e.get("traceback", ""),
                    )
                    for e in obj.errors
                ),
            ),
        )

    @admin.display(description="workflow")
    def workflow_link(self, obj: Job) -> str:
        return obj.workflow_id or "—"

    def get_urls(self) -> list[Any]:
        from headgate_django.console.views import queues_dashboard

        custom = [
            path(
                "queues/",
                self.admin_site.admin_view(queues_dashboard),
                name="headgate_django_queues",
            )
        ]
        return custom + super().get_urls()


@admin.register(Quarantine)
class QuarantineAdmin(ReadOnlyAdmin):
    list_display = ["fingerprint", "kind", "crash_count", "quarantined_at", "sample_job_id"]
    search_fields = ["fingerprint", "kind"]
    exclude = ["sample_payload"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Quarantine._meta.fields if f.name != "sample_payload"]


@admin.register(DutyLease)
class DutyLeaseAdmin(ReadOnlyAdmin):
    list_display = ["name", "holder", "lease_expires_at", "last_run_at", "last_result"]


@admin.register(QueueState)
class QueueStateAdmin(ReadOnlyAdmin):
    list_display = ["name", "paused", "updated_at"]

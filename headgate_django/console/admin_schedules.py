"""Read-only admins of periodic schedules and their tick events. A schedule's target holds
its payload, so it is shown only with the reveal permission, like a job's."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from headgate_django.console.readonly import ReadOnlyAdmin, pretty_json
from headgate_django.models import Schedule, ScheduleEvent


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "spec",
        "timezone",
        "paused",
        "next_run_at",
        "last_enqueued_at",
        "plan_error",
    ]
    list_filter = ["paused", "on_missed", "declared"]
    search_fields = ["^name"]
    readonly_fields = ["target_view"]
    private = ("target_view",)

    @admin.display(description="target")
    def target_view(self, obj: Schedule) -> Any:
        return pretty_json(obj.target)

    def get_urls(self) -> list[Any]:
        from headgate_django.console.urls import schedule_console_urls

        return schedule_console_urls(self.admin_site) + super().get_urls()


@admin.register(ScheduleEvent)
class ScheduleEventAdmin(ReadOnlyAdmin):
    list_display = ["schedule_name", "tick_at", "outcome", "reason", "target_id", "recorded_at"]
    # Newest first by primary key; a schedule's events by (schedule_name, -id) through the
    # filter. A sort by name breaks ties by id in the index's order one way only.
    sortable_by = ()
    list_filter = ["outcome"]
    # With case, a range of (schedule_name, -id) in the list's order. 100 events are kept
    # per schedule, not in all: without case, a search read each schedule's 100.
    search_fields = ["schedule_name__exact"]
    search_help_text = "A schedule name, with case."

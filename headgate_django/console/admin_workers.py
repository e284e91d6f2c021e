"""Read-only admins of the worker registry and the per-minute outcome counters. The live
views of both are the console's workers page and overview dashboard."""

from __future__ import annotations

from django.contrib import admin

from headgate_django.console.readonly import ReadOnlyAdmin
from headgate_django.models import QueueMinute, Worker


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "host",
        "pid",
        "concurrency",
        "in_flight",
        "claimed",
        "completed",
        "last_heartbeat_at",
        "stopped_at",
    ]
    search_fields = ["^id", "=host"]


@admin.register(QueueMinute)
class QueueMinuteAdmin(ReadOnlyAdmin):
    list_display = ["queue", "minute", "completed", "failed", "retried"]
    search_fields = ["=queue"]

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
    sortable_by = ["id"]  # the primary key; heartbeats are indexed but their ties are not
    search_fields = ["^id", "=host"]


@admin.register(QueueMinute)
class QueueMinuteAdmin(ReadOnlyAdmin):
    list_display = ["queue", "minute", "completed", "failed", "retried"]
    sortable_by = ()  # newest minute first, the order of its unique key's index
    search_fields = ["=queue"]
    # A day of minutes per queue: 100,000 rows at 70 queues, and no index leads with queue.
    search_indexed = False

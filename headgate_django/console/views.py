from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from headgate_django.store.stats import queue_overview


def queues_dashboard(request: HttpRequest) -> HttpResponse:
    """Counts by state per queue, oldest available age, arrivals and completions per minute."""
    context = {
        **admin.site.each_context(request),
        "title": "Queues",
        "queues": queue_overview(),
    }
    return TemplateResponse(request, "headgate_django/console/queues.html", context)

"""Console routes, mounted inside the admin site by the ModelAdmins in ``admin.py``.

Mounting them through ``ModelAdmin.get_urls`` (rather than a custom ``AdminSite``) keeps
them working with the default ``admin.site`` and with any site the models are
registered on: ``admin_view`` enforces staff login, and each page then checks the view
permission of the model it shows. Like the admin pages, they answer 403 to every POST.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper
from typing import Any

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from headgate_django.console import access, views
from headgate_django.console.readonly import refuse_unstorable, refuse_writes


def _page(site: AdminSite, view: Callable[..., HttpResponse], permission: str) -> Any:
    def inner(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        if not access.is_console_user(request.user, permission):
            raise PermissionDenied
        refuse_writes(request)
        refuse_unstorable(request)
        request.current_app = site.name
        return view(request, site, **kwargs)

    update_wrapper(inner, view)
    return site.admin_view(inner)


def job_console_urls(site: AdminSite) -> list[URLPattern]:
    """Overview, workers, queues and workflows, under ``<admin>/headgate_django/job/``."""
    jobs = access.VIEW_JOBS
    return [
        path("overview/", _page(site, views.overview, jobs), name="headgate_django_overview"),
        path(
            "workers/",
            _page(site, views.workers_page, access.VIEW_WORKERS),
            name="headgate_django_workers",
        ),
        path("queues/", _page(site, views.queues_dashboard, jobs), name="headgate_django_queues"),
        path(
            "admission/",
            _page(site, views.admission_page, access.VIEW_QUEUE_STATE),
            name="headgate_django_admission",
        ),
        path(
            "workflows/",
            _page(site, views.workflow_list, access.VIEW_WORKFLOWS),
            name="headgate_django_workflows",
        ),
        path(
            "workflows/<path:workflow_id>/graph/",
            _page(site, views.workflow_page, access.VIEW_WORKFLOWS),
            name="headgate_django_workflow",
        ),
    ]


def schedule_console_urls(site: AdminSite) -> list[URLPattern]:
    """The live schedule list, under ``<admin>/headgate_django/schedule/``."""
    return [
        path(
            "console/",
            _page(site, views.schedule_list, access.VIEW_SCHEDULES),
            name="headgate_django_schedules",
        )
    ]


def execution_console_urls(site: AdminSite) -> list[URLPattern]:
    """The durable execution page, under ``<admin>/headgate_django/execution/``."""
    return [
        path(
            "<path:execution_id>/timeline/",
            _page(site, views.execution_page, access.VIEW_EXECUTIONS),
            name="headgate_django_execution_page",
        )
    ]

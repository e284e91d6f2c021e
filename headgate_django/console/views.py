"""Console pages under the admin site: staff only, read-only, using the admin's look.

Each view takes the hosting ``AdminSite`` so breadcrumbs, links and the sidebar work on
any site the models are registered with, not only ``admin.site``. There is no form that
posts here: the only controls are filters, page links, zoom and selection.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from headgate_django.console import access, links
from headgate_django.console.executions import execution_snapshot
from headgate_django.console.snapshots import workflow_snapshot
from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.states import State
from headgate_django.registry import registered_queues
from headgate_django.store.console import workflow_page as read_workflow_page
from headgate_django.store.console import workflow_progress, workflow_queues
from headgate_django.store.stats import eviction_status, queue_overview

PAGE_SIZE = 50
STATES = [s.value for s in State if s is not State.DELETED]
WS_PREFIX = "/ws/headgate/"


def ws_path(kind: str, object_id: str) -> str:
    """Where the page's WebSocket connects (see :mod:`headgate_django.console.routing`)."""
    return f"{WS_PREFIX}{kind}/{quote(object_id, safe='')}/"


def _render(
    request: HttpRequest, site: AdminSite, template: str, title: str, **extra: Any
) -> HttpResponse:
    context = {
        **site.each_context(request),
        "title": title,
        "site_name": site.name,
        "states": STATES,
        **extra,
    }
    return TemplateResponse(request, f"headgate_django/console/{template}", context)


def queues_dashboard(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Counts by state per queue, oldest available age, arrivals and completions per minute."""
    rows = [
        {
            **asdict(q),
            "total": q.total,
            "cells": [(s, q.counts.get(s, 0), s in q.estimated) for s in STATES],
        }
        for q in queue_overview(known_queues=registered_queues())
    ]
    return _render(
        request,
        site,
        "queues.html",
        "Queues",
        queues=rows,
        tab="queues",
        eviction=eviction_status(),
    )


def workflow_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Workflows by id, filtered by coordinator state, queue and id prefix; cursor pages."""
    state = request.GET.get("state") or None
    queue = request.GET.get("queue") or None
    prefix = request.GET.get("q") or None
    cursor = request.GET.get("cursor") or None
    rows = read_workflow_page(
        after=cursor, limit=PAGE_SIZE + 1, state=state, queue=queue, prefix=prefix
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    progress = workflow_progress([r["workflow_id"] for r in rows])
    job_url = links.job_url_builder(site.name)
    for row in rows:
        counts = progress.get(row["workflow_id"], {})
        row["nodes_total"] = sum(counts.values())
        row["nodes_completed"] = counts.get(State.COMPLETED.value, 0)
        row["nodes_running"] = counts.get(State.RUNNING.value, 0)
        row["url"] = links.workflow_url(row["workflow_id"], site.name)
        row["job_url"] = job_url(row["id"])
    filters = {k: v for k, v in (("state", state), ("queue", queue), ("q", prefix)) if v}
    return _render(
        request,
        site,
        "workflows.html",
        "Workflows",
        tab="workflows",
        rows=rows,
        filters=filters,
        queues=workflow_queues(),
        next_cursor=rows[-1]["workflow_id"] if more and rows else None,
        paged=cursor is not None,
    )


def workflow_page(request: HttpRequest, site: AdminSite, workflow_id: str) -> HttpResponse:
    """The live DAG: graph, node panel, timeline. The first snapshot rides in the page."""
    try:
        snapshot = workflow_snapshot(
            workflow_id,
            reveal_signals=access.may_see_signals(request.user),
            job_url=links.job_url_builder(site.name),
        )
    except NotFoundError as exc:
        raise Http404(str(exc)) from exc
    selected = request.GET.get("node") or ""
    job = request.GET.get("job")
    if job:
        selected = next((n["name"] for n in snapshot["nodes"] if n["job_id"] == job), selected)
    return _render(
        request,
        site,
        "workflow.html",
        f"Workflow {workflow_id}",
        workflow_id=workflow_id,
        snapshot=snapshot,
        selected=selected,
        ws_path=ws_path("workflows", workflow_id),
        workflow_list_url=links.admin_url("headgate_django_workflows", site_name=site.name),
    )


def execution_page(request: HttpRequest, site: AdminSite, execution_id: str) -> HttpResponse:
    """A durable execution: header, pending and uncertain Operations, history timeline."""
    try:
        snapshot = execution_snapshot(
            execution_id,
            reveal=access.may_see_payloads(request.user),
            job_url=links.job_url_builder(site.name),
        )
    except NotFoundError as exc:
        raise Http404(str(exc)) from exc
    return _render(
        request,
        site,
        "execution.html",
        f"Execution {execution_id}",
        execution_id=execution_id,
        snapshot=snapshot,
        ws_path=ws_path("executions", execution_id),
        execution_list_url=links.admin_url(
            "headgate_django_execution_changelist", site_name=site.name
        ),
    )

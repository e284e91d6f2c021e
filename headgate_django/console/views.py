"""Console pages under the admin site: staff only, read-only, using the admin's look.

Each view takes the hosting ``AdminSite`` so breadcrumbs, links and the sidebar work on
any site the models are registered with, not only ``admin.site``. There is no form that
posts here: the only controls are filters, page links, zoom and selection.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

from django.contrib.admin import AdminSite
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from headgate_django.conf import headgate_settings
from headgate_django.console import access, links
from headgate_django.console.dashboard import (
    overview_data,
    overview_html,
    workers_data,
    workers_html,
)
from headgate_django.console.executions import execution_snapshot
from headgate_django.console.fanout import GROUP_PREFIX, MAX_EXPANDED
from headgate_django.console.schedules import schedule_links, schedules_snapshot
from headgate_django.console.snapshots import workflow_snapshot
from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.states import State
from headgate_django.kernel.workers import GONE_AFTER_BEATS
from headgate_django.registry import registered_queues
from headgate_django.store.console import workflow_page as read_workflow_page
from headgate_django.store.console import workflow_progress, workflow_queues
from headgate_django.store.fairness import COUNT_UP_TO
from headgate_django.store.stats import eviction_status, queue_overview
from headgate_django.visibility import may_see_payloads

PAGE_SIZE = 50
STATES = [s.value for s in State if s is not State.DELETED]
WS_PREFIX = "/ws/headgate/"


def ws_path(kind: str, object_id: str = "") -> str:
    """Where the page's WebSocket connects (see :mod:`headgate_django.console.routing`)."""
    return f"{WS_PREFIX}{kind}/{quote(object_id, safe='')}/" if object_id else f"{WS_PREFIX}{kind}/"


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


def overview(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """The console's landing page: per queue, depth by state, oldest available age, the
    last hour's outcomes per minute and the jobs each live worker holds; live."""
    show_workers = access.is_console_user(request.user, access.VIEW_WORKERS)
    data = overview_data(site_name=site.name, show_workers=show_workers)
    return _render(
        request,
        site,
        "overview.html",
        "Overview",
        tab="overview",
        fragment=overview_html(data),
        ws_path=ws_path("overview"),
    )


def _span(value: timedelta) -> str:
    """A setting's duration as people write it: ``1 h``, ``30 min``, ``2.5 s``."""
    seconds = value.total_seconds()
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"


def workers_page(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Every registered worker: live, gone (missed heartbeats) or stopped; live."""
    return _render(
        request,
        site,
        "workers.html",
        "Workers",
        tab="workers",
        fragment=workers_html(workers_data()),
        ws_path=ws_path("workers"),
        heartbeat=_span(headgate_settings.WORKER_HEARTBEAT),
        gone_after=GONE_AFTER_BEATS,
        retention=_span(headgate_settings.WORKER_RETENTION),
    )


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


def admission_page(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Admission policies as the claim sees them now: each rate class's tokens, each
    ceiling's running jobs per partition, each backpressure limit against its backlog,
    each queue's weight and backlog, and each fair queue's next partitions."""
    from headgate_django.admission import backpressure_limits, queue_weights, rate_classes
    from headgate_django.store.admission import ceilings_in_use, fairness_in_use

    return _render(
        request,
        site,
        "admission.html",
        "Admission",
        rate_classes=rate_classes(),
        ceilings=ceilings_in_use(),
        backpressure=backpressure_limits(),
        weights=queue_weights(),
        fairness=fairness_in_use(),
        more_than=COUNT_UP_TO,
        tab="admission",
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
    expanded = [g for g in request.GET.getlist("expand") if g.startswith(GROUP_PREFIX)]
    expanded = expanded[:MAX_EXPANDED]

    def read() -> dict[str, Any]:
        return workflow_snapshot(
            workflow_id,
            reveal=may_see_payloads(request.user),
            job_url=links.job_url_builder(site.name),
            expanded=expanded,
        )

    try:
        snapshot = read()
        selected = request.GET.get("node") or ""
        job = request.GET.get("job")
        if job:
            selected = next((n["name"] for n in snapshot["nodes"] if n["job_id"] == job), selected)
        # A node asked for by name is shown: its group, if any, is drawn expanded.
        hidden_in = [
            g["id"] for g in snapshot["groups"] if not g["expanded"] and selected in g["members"]
        ]
        if hidden_in:
            expanded = [*expanded, *hidden_in]
            snapshot = read()
    except NotFoundError as exc:
        raise Http404(str(exc)) from exc
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


def schedule_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    """Schedules by name: the spec in words, the next five fire times in the viewer's zone
    (Django's current time zone) and in UTC, the newest events, paused or not; live."""
    zone = timezone.get_current_timezone_name()
    after = request.GET.get("after") or None
    snapshot = schedules_snapshot(zone=zone, after=after, links=schedule_links(site.name))
    query = urlencode({"site": site.name, "tz": zone, **({"after": after} if after else {})})
    return _render(
        request,
        site,
        "schedules.html",
        "Schedules",
        tab="schedules",
        snapshot=snapshot,
        zone=zone,
        paged=after is not None,
        ws_path=f"{WS_PREFIX}schedules/?{query}",
    )


def execution_page(request: HttpRequest, site: AdminSite, execution_id: str) -> HttpResponse:
    """A durable execution: header, pending and uncertain Operations, sleeps, what it waits
    for, the chain of runs, history timeline."""
    try:
        snapshot = execution_snapshot(
            execution_id,
            reveal=may_see_payloads(request.user),
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
        run_history_url=links.admin_url(
            "headgate_django_runhistoryevent_changelist", site_name=site.name
        ),
        history_url=links.admin_url("headgate_django_historyevent_changelist", site_name=site.name),
        # The page links parent and children: the script puts their ids in for the mark.
        execution_url_template=links.execution_url(links.ID_MARK, site.name),
        id_mark=links.ID_MARK,
    )

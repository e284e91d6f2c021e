"""Every changelist link the admin and the console render opens: the lists refuse any
filter their pages do not offer (``test_admin.py``), so each filter a page does offer —
a list filter's choices, the console's counts, a detail page's "N events" — is walked
here as a staff user would follow it, and must answer 200 (not 400, nor a redirect to
``?e=1``)."""

from __future__ import annotations

import re
from collections import deque
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from headgate_django.models import ExecutionRun
from tests.console.test_dashboard import register

pytestmark = pytest.mark.django_db

MODELS = [m for m in admin.site._registry if m._meta.app_label == "headgate_django"]
#: Pages followed from the first ones: a filtered list, then the lists its own links open
#: (another choice of a filter, a second filter, a sort, a page). Past the first step a
#: link is followed only for a combination of parameters not met yet: the list accepts
#: or refuses a filter by its name, and every combination of values would be thousands
#: of pages.
DEPTH = 2


def _hrefs(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'href="([^"#]*)"', html)]


def _first_pages(data: Any) -> list[str]:
    """The admin index, every console page, every changelist and every row's detail page,
    and the links the execution page's script builds from its data attributes."""
    pages = [
        reverse("admin:index"),
        reverse("admin:app_list", args=["headgate_django"]),
        *(
            reverse(f"admin:headgate_django_{name}")
            for name in ("overview", "queues", "workflows", "workers", "admission", "schedules")
        ),
        reverse("admin:headgate_django_workflow", args=[data.workflow_id]),
    ]
    for model in MODELS:
        prefix = f"admin:headgate_django_{model._meta.model_name}"
        pages.append(reverse(f"{prefix}_changelist"))
        pages += [
            reverse(f"{prefix}_change", args=[quote(pk)])
            for pk in model._default_manager.values_list("pk", flat=True)[:20]
        ]
    history = reverse("admin:headgate_django_historyevent_changelist")
    run_history = reverse("admin:headgate_django_runhistoryevent_changelist")
    for execution_id in (
        data.execution_uncertain,
        data.execution_waiting,
        data.execution_continued,
    ):
        pages.append(reverse("admin:headgate_django_execution_page", args=[execution_id]))
        # execution.js: the current run's history, and each finished run's archive
        pages.append(f"{history}?{urlencode({'execution__id__exact': execution_id})}")
    pages += [
        f"{run_history}?{urlencode({'run__id__exact': pk})}"
        for pk in ExecutionRun.objects.values_list("pk", flat=True)
    ]
    return pages


def test_every_rendered_changelist_link_opens(superuser: Any, console_data: Any) -> None:
    # a live worker holding jobs: the overview links "N on <worker>" to its running jobs
    register("links-worker", in_flight=1, in_flight_by_queue={"default": 1})
    client = Client()
    client.force_login(superuser)
    changelists = {
        reverse(f"admin:headgate_django_{m._meta.model_name}_changelist") for m in MODELS
    }
    seen: set[str] = set()
    shapes: set[tuple[str, frozenset[str]]] = set()
    todo = deque((url, 0) for url in _first_pages(console_data))
    filtered: list[str] = []
    while todo:
        url, depth = todo.popleft()
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        if depth >= DEPTH:
            continue
        page = urlsplit(url)
        for href in _hrefs(response.content.decode()):
            link = urlsplit(href)
            path = link.path or page.path
            if path not in changelists or not link.query:
                continue
            shape = (path, frozenset(parse_qs(link.query, keep_blank_values=True)))
            if depth == 0 or shape not in shapes:
                shapes.add(shape)
                filtered.append(f"{path}?{link.query}")
                todo.append((f"{path}?{link.query}", depth + 1))
    # the walk reached the filters each kind of page builds
    for wanted in (
        "state__exact=",
        "queue__exact=",
        "claimed_by__exact=links-worker",
        "execution__id__exact=",
        "run__id__exact=",
        "failed__exact=",
        "outcome__exact=",
        "on_missed__exact=",
        "kind=",
    ):
        assert any(wanted in url for url in filtered), wanted

"""Every admin changelist and detail page of every headgate model loads for staff with data
present, and none of them offers a way to change data."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from headgate_django.models import Job

HEADGATE_ADMINS = [
    (model, model_admin)
    for model, model_admin in admin.site._registry.items()
    if model._meta.app_label == "headgate_django"
]


class _Controls(HTMLParser):
    """Collects what could submit a change: any control inside a POST form (other than
    the log-out form), and links to add or delete pages."""

    def __init__(self) -> None:
        super().__init__()
        self.in_post_form = False
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            action = a.get("action") or ""
            self.in_post_form = (a.get("method") or "").lower() == "post" and not action.endswith(
                "/logout/"
            )
        elif self.in_post_form and tag in ("input", "button", "select", "textarea"):
            if not (tag == "input" and a.get("type") == "hidden"):
                self.found.append(f"<{tag} {a}>")
        elif tag == "a" and re.search(
            r"/headgate_django/[a-z]+/(add|.+/delete)/", a.get("href") or ""
        ):
            self.found.append(f"link {a.get('href')}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.in_post_form = False


def mutation_controls(html: str) -> list[str]:
    parser = _Controls()
    parser.feed(html)
    return parser.found


def test_every_model_is_registered() -> None:
    from django.apps import apps

    models = set(apps.get_app_config("headgate_django").get_models())
    assert models == {model for model, _ in HEADGATE_ADMINS}


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "viewer"])
@pytest.mark.parametrize("model", [m for m, _ in HEADGATE_ADMINS], ids=lambda m: m._meta.model_name)
def test_changelist_and_detail_load_read_only(
    model: Any, who: str, console_data: Any, request: pytest.FixtureRequest
) -> None:
    client = Client()
    client.force_login(request.getfixturevalue(who))
    prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
    changelist = client.get(reverse(f"{prefix}_changelist"))
    assert changelist.status_code == 200
    assert mutation_controls(changelist.content.decode()) == []
    obj = model._default_manager.first()
    assert obj is not None, f"no {model.__name__} row in the fixture"
    detail = client.get(reverse(f"{prefix}_change", args=[quote(obj.pk)]))
    assert detail.status_code == 200
    assert mutation_controls(detail.content.decode()) == []
    assert 'name="_save"' not in detail.content.decode()
    # The admin itself refuses every write, whatever a client posts.
    assert client.post(reverse(f"{prefix}_change", args=[quote(obj.pk)])).status_code == 403
    assert client.get(reverse(f"{prefix}_add")).status_code == 403
    assert client.get(reverse(f"{prefix}_delete", args=[quote(obj.pk)])).status_code == 403


@pytest.mark.django_db
def test_changelists_search_and_filter(superuser: Any, console_data: Any) -> None:
    client = Client()
    client.force_login(superuser)
    url = reverse("admin:headgate_django_job_changelist")
    for query in (
        {"state__exact": "completed"},
        {"queue__exact": "headgate-workflow"},
        {"kind__exact": "test.echo"},
        {"q": "console-wf:extract"},
        {"q": "test."},
    ):
        response = client.get(url, query)
        assert response.status_code == 200, query
        assert "?e=1" not in response.url if hasattr(response, "url") else True
    found = client.get(url, {"q": "console-wf:extract"}).content.decode()
    assert "console-wf:extract" in found


@pytest.mark.django_db
def test_payload_needs_the_reveal_permission(
    viewer: Any, superuser: Any, console_data: Any
) -> None:
    job = Job.objects.get(pk="console-wf:extract")
    url = reverse("admin:headgate_django_job_change", args=[quote(job.pk)])
    client = Client()
    client.force_login(viewer)
    hidden = client.get(url).content.decode()
    assert "needs the “Can view job payloads” permission" in hidden
    assert "payload-secret" not in hidden
    client.force_login(superuser)
    shown = client.get(url).content.decode()
    assert "payload-secret" in shown
    quarantine = reverse("admin:headgate_django_quarantine_change", args=["f" * 32])
    client.force_login(viewer)
    assert "&quot;secret&quot;" not in client.get(quarantine).content.decode()
    client.force_login(superuser)
    assert "&quot;secret&quot;: &quot;sample&quot;" in client.get(quarantine).content.decode()


@pytest.mark.django_db
def test_job_detail_links_to_its_workflow_and_shows_attempts(
    superuser: Any, console_data: Any
) -> None:
    client = Client()
    client.force_login(superuser)
    url = reverse("admin:headgate_django_job_change", args=[quote("console-wf:extract")])
    html = client.get(url).content.decode()
    graph = reverse("admin:headgate_django_workflow", args=["console-wf"])
    assert f'href="{graph}?job=console-wf%3Aextract"' in html
    for section in ("Attempts", "Checkpoint, result and progress", "Lease", "Payload"):
        assert section in html


@pytest.mark.django_db
def test_admin_index_links_the_console(viewer: Any, staff_without_perms: Any) -> None:
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:index")).content.decode()
    assert "Headgate console" in html
    assert reverse("admin:headgate_django_workflows") in html
    assert reverse("admin:headgate_django_queues") in html
    html = client.get(reverse("admin:app_list", args=["headgate_django"])).content.decode()
    assert reverse("admin:headgate_django_workflows") in html
    client.force_login(staff_without_perms)
    assert "Headgate console" not in client.get(reverse("admin:index")).content.decode()


@pytest.mark.django_db
def test_model_names_read_as_english_plurals(viewer: Any) -> None:
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:app_list", args=["headgate_django"])).content.decode()
    assert "Signal inboxes" in html and "inboxs" not in html.lower()

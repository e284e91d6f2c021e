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
            # Hidden inputs carry nothing a user typed; a type="button" cannot submit
            # (the job list's copy-id buttons).
            inert = (tag == "input" and a.get("type") == "hidden") or (
                tag == "button" and a.get("type") == "button"
            )
            if not inert:
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
@pytest.mark.parametrize(
    ("model_name", "lookup"),
    [
        ("job", "id__regex"),
        ("job", "kind__iregex"),
        ("job", "workflow_id__regex"),
        ("workflowcheckpoint", "workflow_id__regex"),
        ("execution", "name__iregex"),
        ("idempotencyrecord", "path__regex"),
    ],
)
def test_changelists_refuse_regular_expressions(viewer: Any, model_name: str, lookup: str) -> None:
    """The admin takes any lookup on a column as a filter, ``__regex`` included: a viewer's
    pattern then ran against every row the capped pager counts, on SQLite in this process
    through Python's backtracking ``re`` (``^(\\w+)+!`` takes seconds per 26-character id)."""
    client = Client()
    client.force_login(viewer)
    url = reverse(f"admin:headgate_django_{model_name}_changelist")
    assert client.get(url).status_code == 200
    assert client.get(url, {lookup: r"^(\w+)+!"}).status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("model_name", "lookup"),
    [
        ("job", "errors__contains"),
        ("job", "result__icontains"),
        ("job", "progress__message"),
        ("execution", "result__isnull"),
        ("schedule", "target__contains"),
    ],
)
def test_changelists_refuse_filters_inside_json_columns(
    viewer: Any, model_name: str, lookup: str
) -> None:
    """A filter into a JSON column reads every document the capped pager counts, and on
    SQLite ``__contains`` is not supported at all: it was a 500."""
    client = Client()
    client.force_login(viewer)
    url = reverse(f"admin:headgate_django_{model_name}_changelist")
    assert client.get(url, {lookup: "x"}).status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("model_name", "lookup"),
    [
        ("job", "errors__isnull"),
        ("job", "kind__icontains"),
        ("job", "queue__endswith"),
        ("job", "claimed_by__startswith"),
        ("job", "state__isnull"),
        ("job", "finalized_at__lt"),
        ("execution", "name__icontains"),
        ("execution", "task_queue__exact"),
        ("workflowcheckpoint", "coordinator_job_id__exact"),
        ("quarantine", "kind__endswith"),
        ("historyevent", "type__exact"),
        ("effect", "name__icontains"),
        ("schedule", "spec__contains"),
        ("scheduleevent", "reason__exact"),
        ("signalemission", "signal__exact"),
    ],
)
def test_changelists_refuse_filters_no_page_offers(
    viewer: Any, model_name: str, lookup: str
) -> None:
    """Any other lookup on a column (``?errors__isnull=1``, ``?kind__icontains=x``) was
    taken as a filter: no index serves it, so one that matches nothing read every row of
    the table (millions of jobs) for the pager's count and the page."""
    client = Client()
    client.force_login(viewer)
    url = reverse(f"admin:headgate_django_{model_name}_changelist")
    assert client.get(url, {lookup: "x"}).status_code == 400


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
    sections = ("Attempts", "Attempt logs", "Progress", "Checkpoint and result", "Lease", "Payload")
    for section in sections:
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


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "viewer"])
@pytest.mark.parametrize("model", [m for m, _ in HEADGATE_ADMINS], ids=lambda m: m._meta.model_name)
def test_every_post_is_refused(
    model: Any, who: str, console_data: Any, request: pytest.FixtureRequest
) -> None:
    """docs/console.md promises 403 for every POST; a bulk action used to render the
    changelist again with 200 (doing nothing)."""
    client = Client()
    client.force_login(request.getfixturevalue(who))
    prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
    obj = model._default_manager.first()
    assert obj is not None, f"no {model.__name__} row in the fixture"
    pk = quote(obj.pk)
    changelist = reverse(f"{prefix}_changelist")
    bulk = {"action": "delete_selected", "_selected_action": [str(obj.pk)], "post": "yes"}
    answers = {
        "bulk action": client.post(changelist, bulk),
        "changelist": client.post(changelist, {}),
        "add": client.post(reverse(f"{prefix}_add"), {}),
        "change": client.post(reverse(f"{prefix}_change", args=[pk]), {}),
        "delete": client.post(reverse(f"{prefix}_delete", args=[pk]), {"post": "yes"}),
        "history": client.post(reverse(f"{prefix}_history", args=[pk]), {}),
        "put": client.put(reverse(f"{prefix}_change", args=[pk])),
    }
    assert {what: r.status_code for what, r in answers.items()} == dict.fromkeys(answers, 403)
    assert model._default_manager.filter(pk=obj.pk).exists()


@pytest.mark.django_db
def test_console_pages_refuse_posts(superuser: Any, console_data: Any) -> None:
    client = Client()
    client.force_login(superuser)
    for url in (
        reverse("admin:headgate_django_queues"),
        reverse("admin:headgate_django_workflows"),
        reverse("admin:headgate_django_workflow", args=[console_data.workflow_id]),
        reverse("admin:headgate_django_execution_page", args=[console_data.execution_uncertain]),
    ):
        assert client.post(url, {}).status_code == 403, url
        assert client.get(url).status_code == 200, url


@pytest.mark.django_db
def test_the_job_page_says_what_holds_a_waiting_job_back(viewer: Any) -> None:
    from datetime import timedelta

    from headgate_django import admission, store
    from tests.conformance.helpers import enqueue_job

    admission.set_concurrency_limit("console-ceiling", 1)
    both = {enqueue_job(queue="console-ceiling", partition_key="acme") for _ in range(2)}
    (taken,) = store.job_claim(
        worker_id="c", limit=5, lease_ttl=timedelta(minutes=5), queues=["console-ceiling"]
    )
    (waiting,) = both - {taken.ref.job_id}  # either may go first: ids of one millisecond
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:headgate_django_job_change", args=[quote(waiting)]))
    text = html.content.decode()
    assert "waiting: partition acme of queue console-ceiling runs 1 of 1" in text
    assert mutation_controls(text) == []

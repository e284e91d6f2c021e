"""The console pages: staff only, read-only, each showing what its acceptance point asks."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client, override_settings
from django.urls import reverse

from headgate_django.console import views
from tests.console.conftest import signal_workflow
from tests.console.test_admin import mutation_controls


def snapshot_of(html: str) -> dict[str, Any]:
    found = re.search(
        r'<script id="hg-snapshot" type="application/json">(.*?)</script>', html, re.S
    )
    assert found, "the page embeds no snapshot"
    return json.loads(found.group(1))


def pages(data: Any) -> list[str]:
    return [
        reverse("admin:headgate_django_queues"),
        reverse("admin:headgate_django_admission"),
        reverse("admin:headgate_django_workflows"),
        reverse("admin:headgate_django_workflow", args=[data.workflow_id]),
        reverse("admin:headgate_django_execution_page", args=[data.execution_uncertain]),
        reverse("admin:headgate_django_schedules"),
    ]


@pytest.mark.django_db
def test_pages_load_for_staff_without_mutation_controls(viewer: Any, console_data: Any) -> None:
    client = Client()
    client.force_login(viewer)
    for url in pages(console_data):
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert mutation_controls(html) == [], url
        assert 'id="site-name"' in html  # the admin's own chrome and look


@pytest.mark.django_db
def test_pages_refuse_everyone_but_staff_with_view_permission(
    outsider: Any, staff_without_perms: Any, console_data: Any
) -> None:
    anonymous = Client()
    outside = Client()
    outside.force_login(outsider)
    bare = Client()
    bare.force_login(staff_without_perms)
    for url in pages(console_data):
        for client in (anonymous, outside):
            response = client.get(url)
            assert response.status_code == 302 and "/login/" in response["Location"], url
        assert bare.get(url).status_code == 403, url


@pytest.mark.django_db
def test_queues_dashboard(viewer: Any, console_data: Any) -> None:
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:headgate_django_queues")).content.decode()
    assert 'data-queue="paused-queue"' in html
    assert re.search(
        r'data-queue="paused-queue">.*?<strong class="hg-paused">paused</strong>', html, re.S
    )
    assert "Oldest available" in html and "Arrivals /min" in html and "Completions /min" in html
    assert "state__exact=completed" in html


@pytest.mark.django_db
def test_admission_page(viewer: Any) -> None:
    from datetime import timedelta

    from headgate_django import admission, store
    from tests.conformance.helpers import enqueue_job

    admission.set_rate_class("console-mail", limit=5, window=timedelta(seconds=1))
    admission.set_concurrency_limit("console-q", 2)
    admission.set_backpressure("console-q", 7)
    enqueue_job(queue="console-q", partition_key="acme")
    store.job_claim(worker_id="c", limit=5, lease_ttl=timedelta(minutes=5), queues=["console-q"])
    enqueue_job(queue="console-q")
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:headgate_django_admission")).content.decode()
    assert re.search(r'data-rate-class="console-mail">.*?5\.0</td>', html, re.S)
    assert re.search(r'data-ceiling="console-q">.*?acme: 1/2', html, re.S)
    assert re.search(r'data-backpressure="console-q">.*?>2</td>.*?>7</td>', html, re.S)
    assert "No queue has a weight." in html and "No queue is fair" in html
    assert mutation_controls(html) == []


@pytest.mark.django_db
def test_admission_page_shows_weights_and_fairness(viewer: Any) -> None:
    from datetime import timedelta

    from headgate_django import admission, store
    from tests.conformance.helpers import enqueue_job

    admission.set_queue_weight("console-bulk", 3)
    admission.set_fairness("console-fair", quantum=4)
    enqueue_job(queue="console-bulk")
    for tenant, n in (("acme", 6), ("globex", 2)):
        for _ in range(n):
            enqueue_job(queue="console-fair", partition_key=tenant)
    store.job_claim(worker_id="c", limit=1, lease_ttl=timedelta(minutes=5), queues=["console-fair"])
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:headgate_django_admission")).content.decode()
    assert re.search(r'data-weight="console-bulk">.*?>3</td>.*?>0</td>.*?>1</td>', html, re.S)
    row = re.search(r'data-fairness="console-fair">(.*?)</tr>', html, re.S).group(1)
    assert ">4</td>" in row
    assert re.search(r"<strong>acme</strong> \(turn, 3 left\): 5 waiting", row)
    assert "globex: 2 waiting, credit 0" in row
    assert mutation_controls(html) == []


@pytest.mark.django_db
def test_workflow_list_filters_and_cursor_pages(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("wf-a", "wf-b", "wf-c"):
        signal_workflow(name)
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:headgate_django_workflows")
    first = client.get(url).content.decode()
    assert 'data-workflow="wf-a"' in first and 'data-workflow="wf-b"' in first
    assert 'data-workflow="wf-c"' not in first
    assert "cursor=wf-b" in first
    second = client.get(url, {"cursor": "wf-b"}).content.decode()
    assert 'data-workflow="wf-c"' in second and 'data-workflow="wf-a"' not in second
    assert "cursor=" not in second.split('class="hg-pages"')[1]
    assert "0 / 3" in second  # nodes completed of total
    filtered = client.get(url, {"q": "wf-c", "state": "scheduled", "queue": "headgate-workflow"})
    html = filtered.content.decode()
    assert 'data-workflow="wf-c"' in html and 'data-workflow="wf-a"' not in html
    none = client.get(url, {"state": "completed"}).content.decode()
    assert "No workflows match these filters." in none
    # The id prefix is compared as stored, on SQLite too (whose LIKE ignores case).
    other_case = client.get(url, {"q": "WF-C"}).content.decode()
    assert "No workflows match these filters." in other_case


@pytest.mark.django_db
def test_workflow_page_snapshot(viewer: Any, console_data: Any) -> None:
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:headgate_django_workflow", args=[console_data.workflow_id])
    html = client.get(url, {"job": "console-wf:approved"}).content.decode()
    assert 'data-selected="approved"' in html
    assert 'data-ws="/ws/headgate/workflows/console-wf/"' in html
    snap = snapshot_of(html)
    nodes = {n["name"]: n for n in snap["nodes"]}
    assert list(nodes) == ["extract", "approved", "load", "report"]  # the graft is drawn
    assert snap["revision"] == 2
    assert nodes["extract"]["state"] == "completed" and nodes["extract"]["done"]
    assert nodes["extract"]["url"] == reverse(
        "admin:headgate_django_job_change", args=[quote("console-wf:extract")]
    )
    assert nodes["approved"]["wait"] == {"signal": "approved"}
    assert nodes["approved"]["attempt"] == 0 and nodes["approved"]["max_attempts"] >= 1
    assert len(snap["layout"]["positions"]) == 4
    assert [e[:2] for e in snap["layout"]["edges"]] == [[0, 1], [1, 2], [2, 3]]
    signal = snap["signals"][0]
    assert "payload" not in signal and signal["idempotency_key"] == "ops-1"
    events = [e["event"] for e in snap["events"]]
    assert "workflow_started" in events and "workflow_graft_accepted" in events


@pytest.mark.django_db
def test_signal_payloads_need_the_payload_permission(console_data: Any) -> None:
    from tests.console.conftest import make_user

    signals = make_user("signals", staff=True, perms=["view_workflowcheckpoint"])
    client = Client()
    client.force_login(signals)
    url = reverse("admin:headgate_django_workflow", args=[console_data.workflow_id])
    snap = snapshot_of(client.get(url).content.decode())
    assert snap["signals_revealed"] is False
    assert "payload" not in snap["signals"][0] and "source" not in snap["signals"][0]
    payloads = make_user(
        "payloads", staff=True, perms=["view_workflowcheckpoint", "view_job_payload"]
    )
    client.force_login(payloads)
    signal = snapshot_of(client.get(url).content.decode())["signals"][0]
    assert signal["payload"] == {"ok": True} and signal["source"] == {"by": "ops"}


@pytest.mark.django_db
def test_workflow_pages_need_the_workflow_view_permission_as_the_api_does(
    console_data: Any,
) -> None:
    """The graph shows a coordinator's history and signal emissions: the API's
    ``/workflows`` routes ask for ``view_workflowcheckpoint``, so the pages do too."""
    from tests.console.conftest import make_user

    pages = [
        reverse("admin:headgate_django_workflows"),
        reverse("admin:headgate_django_workflow", args=[console_data.workflow_id]),
    ]
    client = Client()
    client.force_login(make_user("jobs", staff=True, perms=["view_job"]))
    assert [client.get(url).status_code for url in pages] == [403, 403]
    client.force_login(make_user("flows", staff=True, perms=["view_workflowcheckpoint"]))
    assert [client.get(url).status_code for url in pages] == [200, 200]


@pytest.mark.django_db
def test_the_admission_page_needs_the_permission_the_api_reads_policies_with() -> None:
    """Rate classes, ceilings, backpressure, weights and fairness are read at
    ``/api/v1/admission/…`` with ``view_queuestate``; the page shows the same policies."""
    from tests.console.conftest import make_user

    url = reverse("admin:headgate_django_admission")
    client = Client()
    client.force_login(make_user("jobs", staff=True, perms=["view_job"]))
    assert client.get(url).status_code == 403
    client.force_login(make_user("switches", staff=True, perms=["view_queuestate"]))
    assert client.get(url).status_code == 200


@pytest.mark.django_db
def test_unknown_workflow_is_404(viewer: Any) -> None:
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:headgate_django_workflow", args=["no-such-workflow"])
    assert client.get(url).status_code == 404


@pytest.mark.django_db
def test_execution_page_flags_pending_and_uncertain(
    viewer: Any, superuser: Any, console_data: Any
) -> None:
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:headgate_django_execution_page", args=[console_data.execution_uncertain])
    snap = snapshot_of(client.get(url).content.decode())
    assert snap["state"] == "suspended"
    assert snap["uncertain"] == ["op:1"] and snap["pending"] == []
    op = snap["operations"][0]
    assert op["status"] == "uncertain" and "the bank did not answer" in op["detail"]
    assert op["url"]
    assert [e["type"] for e in snap["events"]][::-1] == [
        "WorkflowStarted",
        "OperationScheduled",
        "OperationUncertain",
    ]
    assert "input" not in snap["events"][-1]["summary"] and "payload" not in snap["events"][-1]
    url = reverse("admin:headgate_django_execution_page", args=[console_data.execution_waiting])
    snap = snapshot_of(client.get(url).content.decode())
    assert snap["pending"] == ["op:1"]
    client.force_login(superuser)
    snap = snapshot_of(client.get(url).content.decode())
    assert snap["events"][-1]["payload"]["input"] == {"order": 8}


@pytest.mark.django_db
def test_schedule_list_in_words_zones_events_and_paused(viewer: Any, settings: Any) -> None:
    """Each schedule: its spec in words, its next five fire times in the viewer's zone
    (Django's current time zone) and in UTC across a DST change, its newest events with
    their outcomes, and whether it is paused. Only staff with view_schedule see it."""
    from datetime import UTC, datetime

    from headgate_django import schedules
    from headgate_django.models import Schedule
    from headgate_django.schedules.scheduler import run_pass
    from headgate_django.store import db_now
    from tests.app import tasks
    from tests.console.conftest import make_user

    settings.TIME_ZONE = "America/New_York"
    schedules.upsert("berlin", "CRON_TZ=Europe/Berlin 30 2 * * *", tasks.periodic.envelope())
    spring = datetime(2027, 3, 27, 1, 30, tzinfo=UTC)  # 02:30 in Berlin, the day before
    Schedule.objects.filter(name="berlin").update(next_run_at=spring)
    schedules.upsert("every", "@every 90m", tasks.periodic.envelope())
    schedules.upsert("paused", "@hourly", tasks.periodic.envelope(), paused=True)
    Schedule.objects.filter(name="every").update(next_run_at=db_now())
    with override_settings(HEADGATE={"SCHEDULE_GRACE": timedelta(days=1)}):
        run_pass()
    client = Client()
    client.force_login(viewer)
    response = client.get(reverse("admin:headgate_django_schedules"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "/ws/headgate/schedules/?site=admin&amp;tz=America%2FNew_York" in html
    snap = snapshot_of(html)
    assert snap["zone"] == "America/New_York"
    rows = {row["name"]: row for row in snap["schedules"]}
    assert list(rows) == ["berlin", "every", "paused"]
    berlin = rows["berlin"]
    assert berlin["described"] == "At 02:30 (Europe/Berlin)"
    # 2027-03-28 has no 02:30 in Berlin: 03:00 CEST, the gap's end, instead. New York is
    # already on summer time.
    assert [t["utc"] for t in berlin["next_runs"]] == [
        "2027-03-27 01:30:00 UTC",
        "2027-03-28 01:00:00 UTC",
        "2027-03-29 00:30:00 UTC",
        "2027-03-30 00:30:00 UTC",
        "2027-03-31 00:30:00 UTC",
    ]
    assert berlin["next_runs"][0]["local"] == "2027-03-26 21:30:00 EDT"
    assert rows["every"]["described"] == "Every 1 hour 30 minutes, aligned to the UTC epoch"
    assert [e["outcome"] for e in rows["every"]["events"]] == ["enqueued"]
    assert rows["every"]["events"][0]["url"].startswith("/admin/headgate_django/job/")
    assert rows["paused"]["paused"] is True and not rows["berlin"]["paused"]
    assert rows["paused"]["described"] == "Every hour (UTC)"
    assert "payload" not in json.dumps(snap)
    jobs_only = make_user("jobs-only", staff=True, perms=["view_job"])
    other = Client()
    other.force_login(jobs_only)
    assert other.get(reverse("admin:headgate_django_schedules")).status_code == 403


@pytest.mark.django_db
def test_execution_page_shows_the_pending_select_its_sleep_and_the_runs(
    viewer: Any, console_data: Any
) -> None:
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:headgate_django_execution_page", args=[console_data.execution_continued])
    body = client.get(url).content.decode()
    snap = snapshot_of(body)
    assert snap["state"] == "running"
    (sleep,) = snap["timers"]
    assert sleep["command_id"] == "timer:1" and sleep["fired"] is False
    assert sleep["due_at"] and sleep["duration_ms"] == 3_600_000
    assert snap["waiting"] == {
        "select": "select:1",
        "branches": [
            {
                "id": "signal:stop:1",
                "kind": "signal",
                "label": "signal 'stop' (wait 1)",
                "due_at": None,
            },
            {"id": "timer:1", "kind": "timer", "label": "sleep 3600 s", "due_at": sleep["due_at"]},
        ],
    }
    first, current = snap["runs"]
    assert first["run_id"] == console_data.execution_continued and first["pk"] is not None
    assert current["current"] is True and current["number"] == 2 and current["finished_at"] is None
    assert 'data-run-history-url="/admin/headgate_django/runhistoryevent/"' in body
    archived = client.get(f"/admin/headgate_django/runhistoryevent/?run__id__exact={first['pk']}")
    assert archived.status_code == 200  # the filter is allowed: no redirect to ?e=1
    assert archived.context["cl"].result_count == 2  # WorkflowStarted, WorkflowContinuedAsNew
    assert 'id="hg-children"' not in body  # one place for children: the family section
    assert snap["parent_id"] is None and snap["children"] == []
    waiting = reverse("admin:headgate_django_execution_page", args=[console_data.execution_waiting])
    assert snapshot_of(client.get(waiting).content.decode())["waiting"] == {
        "select": None,  # parked on one Operation's result()
        "branches": [
            {"id": "op:1", "kind": "op", "label": "Operation console-ship@1", "due_at": None}
        ],
    }


@pytest.mark.django_db
def test_execution_page_links_parent_and_children(viewer: Any) -> None:
    from headgate_django import durable, testing
    from headgate_django.console.links import ID_MARK

    wf = durable.Client().start("console-parent", "1", 9, workflow_id="order:9").workflow_id
    testing.run_jobs()
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:headgate_django_execution_page", args=[wf])).content.decode()
    snap = snapshot_of(html)
    assert snap["parent_id"] is None
    assert snap["children"] == [
        {"id": "order:9:child:1", "name": "console-ship", "version": "1", "state": "running"}
    ]
    template = reverse("admin:headgate_django_execution_page", args=[ID_MARK])
    assert f'data-url="{template}" data-mark="{ID_MARK}"' in html
    child = reverse("admin:headgate_django_execution_page", args=["order:9:child:1"])
    assert snapshot_of(client.get(child).content.decode())["parent_id"] == wf


@pytest.mark.django_db
def test_a_nul_character_is_not_found_in_a_path_and_refused_in_a_query(
    viewer: Any, console_data: Any
) -> None:
    """PostgreSQL refuses NUL in a query; the console answers 404 or 400 before it asks."""
    client = Client()
    client.force_login(viewer)
    for url in (
        reverse("admin:headgate_django_workflow", args=["a\x00b"]),
        reverse("admin:headgate_django_execution_page", args=["a\x00b"]),
        reverse("admin:headgate_django_job_change", args=["a\x00b"]),
        reverse("admin:headgate_django_execution_change", args=["a\x00b"]),
    ):
        assert client.get(url).status_code == 404, url
    for url, query in (
        (reverse("admin:headgate_django_workflows"), {"q": "a\x00"}),
        (reverse("admin:headgate_django_workflows"), {"cursor": "a\x00"}),
        (reverse("admin:headgate_django_schedules"), {"after": "a\x00"}),
        (reverse("admin:headgate_django_job_changelist"), {"queue__exact": "a\x00"}),
        (reverse("admin:headgate_django_workflowcheckpoint_changelist"), {"workflow_id": "\x00"}),
    ):
        assert client.get(url, query).status_code == 400, (url, query)


@pytest.mark.django_db
def test_a_parked_schedule_shows_why_and_no_fire_times(viewer: Any) -> None:
    """A schedule whose zone the server no longer knows: the list shows it, flagged with
    the reason it cannot be planned, instead of failing or showing times it will not fire."""
    from headgate_django import schedules
    from headgate_django.models import Schedule
    from headgate_django.schedules.scheduler import run_pass
    from headgate_django.store import db_now
    from tests.app import tasks

    schedules.upsert("gone-zone", "@hourly", tasks.periodic.envelope())
    Schedule.objects.filter(name="gone-zone").update(
        spec="0 * * * *", timezone="Mars/Olympus", next_run_at=db_now()
    )
    assert run_pass() == {"parked": 1}
    client = Client()
    client.force_login(viewer)
    snap = snapshot_of(client.get(reverse("admin:headgate_django_schedules")).content.decode())
    (row,) = snap["schedules"]
    assert row["plan_error"] == "unknown time zone 'Mars/Olympus'"
    assert row["next_runs"] == []
    assert [(e["outcome"], e["reason"]) for e in row["events"]] == [
        ("parked", "cannot be planned: unknown time zone 'Mars/Olympus'")
    ]
    admin_list = client.get(reverse("admin:headgate_django_schedule_changelist"))
    assert "unknown time zone" in admin_list.content.decode()

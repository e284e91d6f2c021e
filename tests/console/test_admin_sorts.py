"""A changelist sorts only by the columns its ``sortable_by`` names (an index serves
them); ``?o=`` naming another column is dropped, and the page keeps its default order.
Django alone takes ``sortable_by`` for the header links only, and sorted by the column."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from headgate_django.console.readonly import ReadOnlyAdmin
from headgate_django.models import Execution, Job
from tests.conformance.helpers import enqueue_job

pytestmark = pytest.mark.django_db


def _page(client: Client, name: str, order: str) -> list[Any]:
    response = client.get(reverse(f"admin:headgate_django_{name}_changelist"), {"o": order})
    assert response.status_code == 200
    return [obj.pk for obj in response.context["cl"].result_list]


def test_a_sort_by_a_column_no_index_serves_keeps_the_default_order(superuser: Any) -> None:
    now = timezone.now()
    # Newest first is c, b, a; by state (ascending or not) it would be another order.
    for n, (pk, state) in enumerate([("a", "succeeded"), ("b", "failed"), ("c", "running")]):
        Execution.objects.create(
            id=pk,
            name="w",
            version="1",
            state=state,
            created_at=now + timedelta(seconds=n),
            updated_at=now,
        )
    client = Client()
    client.force_login(superuser)
    columns = list(admin.site._registry[Execution].list_display)
    for column in ("state_badge", "created", "name"):
        index = columns.index(column)
        for order in (str(index), f"-{index}"):
            assert _page(client, "execution", order) == ["c", "b", "a"], (column, order)
    assert _page(client, "execution", str(columns.index("execution_id"))) == ["a", "b", "c"]


def test_the_job_list_sorts_by_its_id_only(superuser: Any) -> None:
    ids = [enqueue_job(queue=q) for q in ("q3", "q1", "q2")]
    client = Client()
    client.force_login(superuser)
    columns = list(admin.site._registry[Job].list_display)
    newest_first = sorted(ids, reverse=True)
    queue = columns.index("queue")
    # Both directions: ids made in one millisecond may happen to be in one queue order.
    for order in (str(queue), f"-{queue}"):
        assert _page(client, "job", order) == newest_first, order
    assert _page(client, "job", str(columns.index("job_id"))) == sorted(ids)


def test_every_console_changelist_sorts_only_where_it_says() -> None:
    """Each read-only admin over a table that grows names the sorts it allows."""
    unbounded = {
        "execution",
        "historyevent",
        "executionrun",
        "runhistoryevent",
        "signalinbox",
        "idempotencyrecord",
        "scheduleevent",
        "effect",
        "workflowcheckpoint",
        "signalemission",
        "graft",
        "uniquewindow",
        "job",
        "worker",
        "queueminute",
    }
    for model, model_admin in admin.site._registry.items():
        if model._meta.model_name in unbounded:
            assert isinstance(model_admin, ReadOnlyAdmin)
            assert model_admin.sortable_by is not None, model._meta.model_name

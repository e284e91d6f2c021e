"""User data in the console follows the API's rule (headgate_django.visibility): staff with
every view permission but ``view_job_payload`` find it on no admin page, console page or
socket message, cannot filter on it, and a holder of the permission sees it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from headgate_django.visibility import PRIVATE_FIELDS
from headgate_django.workflows import SignalEmission, emit_signal_with
from tests.console.test_admin import HEADGATE_ADMINS
from tests.console.test_consumers import communicator
from tests.user_data import SECRET, UserData, seed_user_data

MODELS = [model for model, _ in HEADGATE_ADMINS]
#: Models whose rows in :func:`seed_user_data` hold the secret.
HOLDERS = set(PRIVATE_FIELDS)


@pytest.fixture
def user_data(db: Any) -> UserData:
    return seed_user_data()


def admin_pages(model: Any) -> list[str]:
    prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
    rows = model._default_manager.all()
    return [reverse(f"{prefix}_changelist")] + [
        reverse(f"{prefix}_change", args=[quote(obj.pk)]) for obj in rows
    ]


def seen(client: Client, urls: list[str]) -> bool:
    found = False
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        found = found or SECRET in response.content.decode()
    return found


@pytest.mark.django_db
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m._meta.model_name)
def test_admin_pages_show_user_data_only_with_the_permission(
    model: Any, viewer: Any, reader: Any, user_data: UserData
) -> None:
    client = Client()
    client.force_login(viewer)
    assert not seen(client, admin_pages(model))
    client.force_login(reader)
    assert seen(client, admin_pages(model)) is (model._meta.model_name in HOLDERS)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "model_name,field",
    [(m, f) for m, fields in sorted(PRIVATE_FIELDS.items()) for f in sorted(fields)],
)
def test_changelists_refuse_filters_on_user_data(
    model_name: str, field: str, reader: Any, user_data: UserData
) -> None:
    # Counting the rows that match a guess would read a value without showing it.
    client = Client()
    client.force_login(reader)
    url = reverse(f"admin:headgate_django_{model_name}_changelist")
    assert client.get(url).status_code == 200
    assert client.get(url, {f"{field}__contains": SECRET}).status_code == 400
    assert client.get(url, {f"{field}__isnull": "False"}).status_code == 400


@pytest.mark.django_db
def test_console_pages_show_user_data_only_with_the_permission(
    viewer: Any, reader: Any, user_data: UserData
) -> None:
    pages = [
        reverse("admin:headgate_django_queues"),
        reverse("admin:headgate_django_workflows"),
        reverse("admin:headgate_django_workflow", args=[user_data.workflow_id]),
        reverse("admin:headgate_django_execution_page", args=[user_data.execution_id]),
    ]
    client = Client()
    client.force_login(viewer)
    assert not seen(client, pages)
    client.force_login(reader)
    for page in pages[2:]:
        assert seen(client, [page]), page


def receive_snapshot_then_signal(user: Any, workflow_id: str) -> list[dict[str, Any]]:
    """The first snapshot, then the push that follows a new signal emission."""

    async def scenario() -> list[dict[str, Any]]:
        comm = communicator(f"/ws/headgate/workflows/{workflow_id}/", user)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        first = await comm.receive_json_from(timeout=10)
        key = f"late-{user.username}"
        emission = SignalEmission("approved", key, {"late": SECRET}, {"actor": SECRET})
        await database_sync_to_async(emit_signal_with)(workflow_id, emission)
        while True:
            pushed = await comm.receive_json_from(timeout=10)
            if "signals" in pushed:
                break
        await comm.disconnect()
        return [first, pushed]

    return async_to_sync(scenario)()


def receive_execution(user: Any, execution_id: str) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        comm = communicator(f"/ws/headgate/executions/{execution_id}/", user)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        message = await comm.receive_json_from(timeout=10)
        await comm.disconnect()
        return message

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_sockets_push_user_data_only_with_the_permission(viewer: Any, reader: Any) -> None:
    data = seed_user_data()
    hidden = receive_snapshot_then_signal(viewer, data.workflow_id)
    assert [len(m.get("signals") or m["snapshot"]["signals"]) for m in hidden] == [1, 2]
    assert SECRET not in json.dumps(hidden)
    assert SECRET not in json.dumps(receive_execution(viewer, data.execution_id))
    shown = receive_snapshot_then_signal(reader, data.workflow_id)
    assert shown[1]["signals"][0]["payload"] == {"late": SECRET}
    assert SECRET in json.dumps(receive_execution(reader, data.execution_id))

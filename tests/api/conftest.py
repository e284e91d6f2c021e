"""Clients for the three callers every route is tried with, and a few ready-made objects.

- ``anon``: nobody (401/403 on every route);
- ``viewer``: the view permission of every headgate model (reads, never mutations, no
  user data);
- ``operator``: the views plus ``headgate_django.operate`` and
  ``headgate_django.view_job_payload``;
- ``blind_operator``: the operator without ``view_job_payload`` (mutations, no user data).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from headgate_django import enqueue
from headgate_django.workflows import Workflow
from tests.api import defs  # noqa: F401  (registers the API tests' tasks and workflows)
from tests.app import tasks

VIEW_PERMS = [
    "view_job",
    "view_queuestate",
    "view_quarantine",
    "view_workflowcheckpoint",
    "view_execution",
    "view_schedule",
    "view_worker",
]
_keys = itertools.count()


class Api:
    """A test client speaking the API's dialect: JSON bodies, an Idempotency-Key on
    every mutation (a fresh one unless ``key=`` is given; ``key=None`` sends none)."""

    def __init__(self, client: APIClient) -> None:
        self.client = client

    def get(self, path: str, params: dict[str, Any] | None = None, **headers: Any) -> Any:
        return self.client.get(path, params or {}, **headers)

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | bool | None = True,
        **headers: Any,
    ) -> Any:
        if key is True:
            key = f"test-key-{next(_keys)}"
        if key is not None and key is not False:
            headers["HTTP_IDEMPOTENCY_KEY"] = key
        data = b"" if body is None else json.dumps(body).encode()
        content_type = "application/json" if body is not None else None
        call = getattr(self.client, method.lower())
        if content_type:
            return call(path, data=data, content_type=content_type, **headers)
        return call(path, **headers)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.send("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.send("PUT", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.send("DELETE", path, None, **kw)


def _user(name: str, perms: list[str]) -> User:
    user = User.objects.create_user(name)  # no password: hashing one costs ~0.3 s
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="headgate_django", codename__in=perms)
    )
    return User.objects.get(pk=user.pk)  # drop the permission cache


@pytest.fixture
def viewer_user(db: Any) -> User:
    return _user("viewer", VIEW_PERMS)


@pytest.fixture
def operator_user(db: Any) -> User:
    return _user("operator", [*VIEW_PERMS, "operate", "view_job_payload"])


@pytest.fixture
def blind_operator_user(db: Any) -> User:
    return _user("blind-operator", [*VIEW_PERMS, "operate"])


def _api(user: User | None) -> Api:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return Api(client)


@pytest.fixture
def anon(db: Any) -> Api:
    return _api(None)


@pytest.fixture
def viewer(viewer_user: User) -> Api:
    return _api(viewer_user)


@pytest.fixture
def operator(operator_user: User) -> Api:
    return _api(operator_user)


@pytest.fixture
def blind_operator(blind_operator_user: User) -> Api:
    return _api(blind_operator_user)


def onboarding_workflow(workflow_id: str = "onboarding:42") -> str:
    """The seed's workflow: prepare → approval (signal "approved") → welcome."""
    enqueue(
        Workflow(workflow_id)
        .add("prepare", tasks.echo.envelope(value="p"), [])
        .add_signal("approval", "approved", ["prepare"])
        .add("welcome", tasks.echo.envelope(value="w"), ["approval"])
        .prepare()
    )
    return workflow_id


@pytest.fixture
def onboarding(db: Any) -> str:
    return onboarding_workflow()

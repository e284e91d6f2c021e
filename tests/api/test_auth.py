"""Authentication is the project's DRF configuration (token and session here); read-only
mode; public health probes; the schema and docs pages."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.api.conftest import Api
from tests.api.routes import ROUTES

pytestmark = pytest.mark.django_db


def test_token_authentication(operator_user: Any) -> None:
    token = Token.objects.create(user=operator_user)
    client = APIClient()
    assert client.get("/api/v1/jobs").status_code == 401
    response = client.get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    paused = client.post(
        "/api/v1/queues/q/pause?create=true",
        HTTP_AUTHORIZATION=f"Token {token.key}",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert paused.status_code == 204


def test_session_authentication_with_csrf(operator_user: Any) -> None:
    operator_user.set_password("pw")
    operator_user.save()
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="operator", password="pw")
    assert client.get("/api/v1/jobs").status_code == 200
    refused = client.post("/api/v1/queues/q/pause?create=true", HTTP_IDEMPOTENCY_KEY="k")
    assert refused.status_code == 403  # a session mutation needs the CSRF token
    assert refused.json()["error"]["code"] == "permission_denied"
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    ok = client.post(
        "/api/v1/queues/q/pause?create=true", HTTP_IDEMPOTENCY_KEY="k", HTTP_X_CSRFTOKEN=token
    )
    assert ok.status_code == 204


def test_authentication_classes_for_this_api_alone(operator_user: Any, settings: Any) -> None:
    settings.HEADGATE = {
        "API_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"]
    }
    token = Token.objects.create(user=operator_user)
    response = APIClient().get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 403  # token ignored; session first: no WWW-Authenticate
    assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.parametrize("route", [r for r in ROUTES if not r.is_read], ids=str)
def test_read_only_mode_refuses_every_mutation(operator: Api, settings: Any, route: Any) -> None:
    settings.HEADGATE = {"API_READ_ONLY": True}
    path, body = route.setup()
    response = operator.send(route.method, path, body)
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "read_only"


def test_read_only_mode_keeps_reads(operator: Api, settings: Any) -> None:
    settings.HEADGATE = {"API_READ_ONLY": True}
    assert operator.get("/api/v1/jobs").status_code == 200
    assert operator.get("/api/v1/meta").json()["read_only"] is True


def test_public_health_probes(anon: Api, settings: Any) -> None:
    settings.HEADGATE = {"API_PUBLIC_HEALTH": True}
    with CaptureQueriesContext(connection) as queries:
        assert anon.get("/api/v1/healthz").json() == {"status": "ok"}
    assert queries.captured_queries == []  # liveness never touches the database
    assert anon.get("/api/v1/readyz").json() == {"status": "ready"}
    assert anon.get("/api/v1/meta").status_code == 401  # only the probes are public


def test_meta(viewer: Api) -> None:
    meta = viewer.get("/api/v1/meta").json()
    assert meta["database"] == connection.vendor
    assert meta["limits"]["max_page_size"] == 200
    assert meta["limits"]["max_body_bytes"] == 2 * 1024 * 1024
    assert {"transactional", "workflows", "durable"} <= set(meta["capabilities"])


def test_schema_needs_authentication(anon: Api, viewer: Api) -> None:
    assert anon.get("/api/v1/schema/").status_code == 401
    response = viewer.get("/api/v1/schema/")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
    yaml = viewer.get("/api/v1/schema/", {"format": "yaml"})
    assert yaml.status_code == 200 and yaml.content.startswith(b"openapi: 3")


def test_swagger_ui_only_in_debug(viewer: Api, settings: Any) -> None:
    settings.DEBUG = False
    assert viewer.get("/api/v1/docs/").status_code == 404
    settings.DEBUG = True
    page = viewer.get("/api/v1/docs/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and b"swagger" in page.content.lower()

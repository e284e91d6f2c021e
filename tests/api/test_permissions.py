"""Every route, tried by nobody, by a view-only user and by an operator.

Anonymous callers get 401 (token authentication comes first in the test settings, so
the answer names its scheme); a viewer reads but every mutation is 403 — before the
Idempotency-Key is even looked at; an operator succeeds.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from tests.api.routes import ROUTES, Route

pytestmark = pytest.mark.django_db


def call(api: Api, route: Route) -> Any:
    path, body = route.setup()
    if route.is_read:
        return api.get(path)
    return api.send(route.method, path, body if body is not None else None)


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_anonymous_is_refused(anon: Api, route: Route) -> None:
    response = call(anon, route)
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_viewer_reads_but_cannot_mutate(viewer: Api, route: Route) -> None:
    response = call(viewer, route)
    if route.is_read:
        assert response.status_code == route.status, response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_operator_succeeds(operator: Api, route: Route) -> None:
    response = call(operator, route)
    assert response.status_code == route.status, response.content


def test_the_table_covers_every_route_in_the_schema(operator: Api) -> None:
    schema = operator.get("/api/v1/schema/").json()
    documented = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    }
    assert documented == {(r.method, r.template) for r in ROUTES}

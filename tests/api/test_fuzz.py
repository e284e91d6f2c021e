"""schemathesis over the generated OpenAPI schema: every operation, authenticated as an
operator, a bounded number of generated requests each; no 5xx, and every response (status,
content type, headers, body) as the schema describes it.

Generated ids rarely name anything, so about half of the cases have their path
parameters swapped for objects that exist (a job, a workflow and its node, a queue, an
execution), which makes the fuzzer reach the success paths and not only the 404s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.settings import patched_settings
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from headgate_django import durable
from headgate_django.api.schema import SPECTACULAR_SETTINGS
from tests.api.conftest import VIEW_PERMS, _user, onboarding_workflow
from tests.conformance.helpers import enqueue_job

pytestmark = [pytest.mark.django_db, pytest.mark.fuzz]

EXAMPLES = 12  # per operation: ~40 operations stay well under a minute on every database
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _schema() -> dict[str, Any]:
    with patched_settings(SPECTACULAR_SETTINGS):
        raw = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(raw))


#: The fuzzing phase, bounded by ``max_examples``; the coverage phase would add an
#: unbounded number of boundary cases per operation.
CONFIG = schemathesis.Config.from_dict(
    {"phases": {"coverage": {"enabled": False}}, "generation": {"mode": "positive"}}
)
schema = schemathesis.openapi.from_dict(_schema(), config=CONFIG)
APP = get_wsgi_application()


@pytest.fixture
def keep_connection() -> Iterator[None]:
    """Requests go through the real WSGI handler, which closes "old" connections when a
    request starts and finishes — the test's own, inside its transaction. Django's test
    client unhooks the same signal handler; so does this."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(db: Any, keep_connection: None) -> dict[str, str]:
    """Objects the fuzzer's path parameters are sometimes pointed at."""
    onboarding_workflow()
    durable.Client().start("api-wait", "1", {"n": 1}, workflow_id="exec:1")
    operator = _user("fuzzer", [*VIEW_PERMS, "operate"])
    return {
        "token": Token.objects.create(user=operator).key,
        "id": enqueue_job(queue="fuzz"),
        "workflow_id": "onboarding:42",
        "node": "approval",
        "name": "fuzz",
        "fingerprint": "0" * 32,
    }


def _exists(case: Any, world: dict[str, str]) -> None:
    params = case.path_parameters or {}
    if not params:
        return
    digest = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).digest()
    if digest[0] % 2:
        return
    for name in params:
        value = world.get(name)
        if "durable" in case.operation.path and name == "workflow_id":
            value = "exec:1"
        if value:
            params[name] = value


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case: Any, world: dict[str, str]) -> None:
    _exists(case, world)
    case.call_and_validate(
        app=APP,
        base_url="http://testserver",
        headers={"Authorization": f"Token {world['token']}"},
        checks=CHECKS,
    )

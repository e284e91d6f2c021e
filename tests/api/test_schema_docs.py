"""The OpenAPI schema is complete and clean, and docs/api.md documents every operation in
it (the page is checked against the schema, not written from memory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings

from headgate_django.api import errors
from headgate_django.api.schema import ERRORS, SPECTACULAR_SETTINGS
from tests.api.conftest import Api

DOC = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")


def generate() -> dict:
    with patched_settings(SPECTACULAR_SETTINGS):
        return SchemaGenerator().get_schema(request=None, public=True)


def test_generation_has_no_warnings_or_errors() -> None:
    GENERATOR_STATS.reset()
    with GENERATOR_STATS.silence():
        generate()
    assert not GENERATOR_STATS._warn_cache and not GENERATOR_STATS._error_cache


@pytest.mark.django_db
def test_every_operation_is_in_the_doc(viewer: Api) -> None:
    schema = viewer.get("/api/v1/schema/").json()
    missing = [
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method in operations
        if f"`{method.upper()} {path}`" not in DOC
    ]
    assert not missing, f"docs/api.md does not document: {missing}"


def test_every_documented_route_exists() -> None:
    schema = generate()
    routes = {f"{m.upper()} {p}" for p, ops in schema["paths"].items() for m in ops}
    documented = set(re.findall(r"`((?:GET|POST|PUT|DELETE) /api/v1/[^`?]*)`", DOC))
    # Served, not in the schema.
    pages = {"GET /api/v1/", "GET /api/v1/schema/", "GET /api/v1/docs/", "GET /api/v1/redoc/"}
    assert documented - pages <= routes, documented - pages - routes


def test_every_operation_describes_its_errors_and_key() -> None:
    for path, operations in generate()["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"400", "401", "403", "404", "500", "503"} <= codes, (method, path)
            for code in codes - {"200", "201", "202", "204"}:
                content = operation["responses"][code]["content"]["application/json"]
                assert content["schema"] == {"$ref": "#/components/schemas/Error"}
            names = {p["name"] for p in operation.get("parameters", [])}
            assert ("Idempotency-Key" in names) == (method != "get"), (method, path)
            assert operation.get("summary"), (method, path)


def test_every_error_code_the_api_adds_is_documented() -> None:
    own = [
        cls.default_code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.ApiError) and cls is not errors.ApiError
    ]
    for code in [*own, "invalid", "parse_error", "internal_error", "method_not_allowed"]:
        assert f"`{code}`" in DOC, code
    for status in ERRORS:
        assert f"| {status} |" in DOC, status


def test_the_permission_table_names_every_route_groups_view_permission() -> None:
    """The "a read" row of the doc's permission table lists the view permission of every
    model a route checks, so nobody has to find out by being refused."""
    from headgate_django.api.permissions import model_permission
    from headgate_django.api.urls import router

    row = next(line for line in DOC.splitlines() if line.startswith("| a read (`GET`) |"))
    needed = {
        model_permission(viewset.permission_model, "view").split(".", 1)[1]
        for _, viewset, _ in router.registry
    }
    missing = sorted(codename for codename in needed if f"`{codename}`" not in row)
    assert not missing, f"docs/api.md's permission table does not name: {missing}"

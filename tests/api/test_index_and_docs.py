"""The API's front door: an index at ``/api/v1/``, trailing slashes redirected, the schema
by content negotiation, and docs pages whose every script and style is served from here."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from headgate_django.models import Job
from tests.conformance.helpers import enqueue_job

pytestmark = pytest.mark.django_db

DOCS_ASSETS = [
    "swagger-ui.css",
    "swagger-ui-bundle.js",
    "swagger-ui-standalone-preset.js",
    "favicon-32x32.png",
    "redoc.standalone.js",
]


def test_the_index_links_every_collection_and_page(viewer):
    response = viewer.get("/api/v1/")
    assert response.status_code == 200
    links = response.json()["links"]
    for name in ("jobs", "queues", "quarantine", "workflows", "durable_executions", "schema"):
        assert links[name].startswith("http://testserver/api/v1/")
        assert viewer.get(links[name]).status_code == 200, name


def test_the_index_links_every_collection_of_the_router(viewer):
    from django.urls import reverse

    from headgate_django.api.urls import router

    links = set(viewer.get("/api/v1/").json()["links"].values())
    missing = [
        basename
        for _, viewset, basename in router.registry
        if hasattr(viewset, "list")
        and f"http://testserver{reverse(f'headgate_api:{basename}-list')}" not in links
    ]
    assert not missing, missing


def test_the_index_needs_a_user(anon):
    assert anon.get("/api/v1/").status_code == 401


@pytest.mark.parametrize(
    ("path", "target"),
    [("/api/v1/jobs/", "/api/v1/jobs"), ("/api/v1/jobs/?limit=5", "/api/v1/jobs?limit=5")],
)
def test_a_trailing_slash_is_redirected_keeping_the_method(viewer, path, target):
    response = viewer.get(path)
    assert (response.status_code, response["Location"]) == (308, target)


@override_settings(DEBUG=True)  # the docs pages are served with DEBUG only
@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/api/v1/docs", "/api/v1/docs/"),
        ("/api/v1/redoc", "/api/v1/redoc/"),
        ("/api/v1/schema?format=json", "/api/v1/schema/?format=json"),
    ],
)
def test_the_pages_with_a_trailing_slash_are_found_without_it(viewer, path, target):
    """A person types ``/api/v1/docs``: the pages that end in a slash (unlike the API's
    routes) send them on instead of answering 404."""
    response = viewer.get(path)
    assert (response.status_code, response["Location"]) == (308, target)
    assert viewer.get(target).status_code == 200


def test_a_post_with_a_trailing_slash_is_redirected_too(operator):
    response = operator.send("POST", "/api/v1/jobs/", {"kind": "test.noop"})
    assert (response.status_code, response["Location"]) == (308, "/api/v1/jobs")


def test_a_redirect_names_the_same_resource_whatever_its_id_holds(operator):
    """The id arrives percent-decoded: the redirect must encode it again, or ``abc%3Fx/``
    sends the request on to job ``abc`` with a query string ``x`` (a DELETE followed there
    deletes another job), and ``a%25b/`` to a path that is not a percent-encoding."""
    for job_id in ("abc", "abc?x", "a%b", "a#b"):
        enqueue_job(id=job_id)
    for job_id, sent in (("abc?x", "abc%3Fx"), ("a%b", "a%25b"), ("a#b", "a%23b")):
        response = operator.delete(f"/api/v1/jobs/{sent}/")
        assert response.status_code == 308
        assert response["Location"] == f"/api/v1/jobs/{sent}"
        assert operator.delete(response["Location"]).status_code == 204, job_id
    assert set(Job.objects.values_list("id", flat=True)) == {"abc"}


def test_a_trailing_slash_is_redirected_under_a_script_prefix(viewer):
    """Under a script prefix (the project mounted at ``/ops``), the route is looked up
    without it and the redirect keeps it."""
    response = viewer.client.get("/api/v1/jobs/?limit=5", SCRIPT_NAME="/ops")
    assert (response.status_code, response["Location"]) == (308, "/ops/api/v1/jobs?limit=5")


def test_a_trailing_slash_on_no_route_is_the_envelope_404(viewer):
    response = viewer.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize(
    ("path", "status", "target"),
    [
        ("/api/v1/jobs/", 308, "/api/v1/jobs"),
        ("/api/v1/nothing-here/", 404, None),
        ("/api/v1/schema", 308, "/api/v1/schema/"),
        ("/api/v1/docs", 308, "/api/v1/docs/"),
    ],
)
def test_a_slash_redirect_answers_a_token_mutation_like_a_read(
    operator_user, method, path, status, target
):
    # Django's CSRF check applies to plain views: it answered these with its HTML 403,
    # which is not the API's error envelope.
    token = Token.objects.create(user=operator_user)
    client = APIClient(enforce_csrf_checks=True)
    response = client.generic(
        method,
        path,
        b'{"kind": "test.noop"}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token.key}",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert response.status_code == status, response.content
    if status == 308:
        assert response["Location"] == target
    else:
        assert response.json()["error"]["code"] == "not_found"


def test_the_redirect_opens_no_csrf_hole_for_a_session(operator_user):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator_user)
    body = {"data": b'{"kind": "test.noop"}', "content_type": "application/json"}
    redirected = client.post("/api/v1/jobs/", **body, HTTP_IDEMPOTENCY_KEY="k")
    assert (redirected.status_code, redirected["Location"]) == (308, "/api/v1/jobs")
    refused = client.post(redirected["Location"], **body, HTTP_IDEMPOTENCY_KEY="k")
    assert refused.status_code == 403  # the route itself checks CSRF for a session
    assert refused.json()["error"]["code"] == "permission_denied"
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("application/json", "application/json"),
        ("application/vnd.oai.openapi+json", "application/vnd.oai.openapi+json"),
        ("application/yaml", "application/yaml"),
    ],
)
def test_the_schema_is_served_for_the_common_media_types(viewer, accept, content_type):
    response = viewer.get("/api/v1/schema/", HTTP_ACCEPT=accept)
    assert response.status_code == 200
    assert response["Content-Type"].startswith(content_type)
    if "json" in accept:
        assert json.loads(response.content)["openapi"].startswith("3.")
    else:
        assert response.content.startswith(b"openapi: 3.")


@override_settings(DEBUG=True)
@pytest.mark.parametrize(("page", "asset"), [("docs", "swagger-ui-bundle.js"), ("redoc", "redoc")])
def test_the_docs_pages_load_nothing_from_elsewhere(viewer, page, asset):
    html = viewer.get(f"/api/v1/{page}/").content.decode()
    assert "/api/v1/docs/assets/" in html and asset in html
    for marker in ("https://", "http://", "//cdn", "googleapis"):
        assert marker not in html, marker


@override_settings(DEBUG=True)
@pytest.mark.parametrize("name", DOCS_ASSETS)
def test_each_docs_asset_is_served(anon, name):
    response = anon.get(f"/api/v1/docs/assets/{name}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content)


@override_settings(DEBUG=True)
@pytest.mark.parametrize("name", ["../../../settings.py", "swagger-ui.css.map", "LICENSE", "x"])
def test_nothing_else_is_served_as_an_asset(anon, name):
    assert anon.get(f"/api/v1/docs/assets/{name}").status_code == 404


def test_without_debug_neither_pages_nor_assets_are_served(viewer):
    assert viewer.get("/api/v1/docs/").status_code == 404
    assert viewer.get("/api/v1/redoc/").status_code == 404
    assert viewer.get("/api/v1/docs/assets/swagger-ui-bundle.js").status_code == 404


#: A URLconf that does not route the API (this module, as ROOT_URLCONF).
urlpatterns: list[object] = []


@override_settings(DEBUG=True)
def test_docs_pages_that_cannot_find_their_templates_are_a_system_check_warning(settings):
    """The docs pages render drf-spectacular's templates: without its app in
    INSTALLED_APPS (the README's and the tutorial's list leave it out) their first visit
    was a TemplateDoesNotExist error page. `manage.py check` (and runserver) say so."""
    from django.core.checks import Tags, run_checks

    def warned() -> bool:
        return "headgate.W005" in [m.id for m in run_checks(tags=[Tags.urls])]

    without = [app for app in settings.INSTALLED_APPS if app != "drf_spectacular"]
    with override_settings(INSTALLED_APPS=without):
        assert warned()
        with override_settings(ROOT_URLCONF=__name__):  # no API routed: nothing to say
            assert not warned()
        with override_settings(DEBUG=False):  # no docs pages served: nothing to say
            assert not warned()
    assert not warned()

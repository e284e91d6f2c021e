"""``/api/v1/``: where a newcomer lands first. Links to every collection, the schema and
the docs pages, so the API can be explored from its root with nothing but ``curl``.

A path with a trailing slash (``/api/v1/jobs/``) is redirected to the slashless route it
names (308, which keeps the method and body), rather than answered with a 404 that
leaves the caller guessing; and the pages that do end in one (schema, docs) are found
without it.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.urls import Resolver404, resolve, reverse
from django.utils.encoding import escape_uri_path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django import __version__
from headgate_django.api.base import HeadgateAPIView
from headgate_django.api.errors import not_found
from headgate_django.api.permissions import IsAuthenticated
from headgate_django.api.schema import document

#: The collections and pages the index links, by URL name.
_LINKS = {
    "jobs": "headgate_api:job-list",
    "job_counts": "headgate_api:job-counts",
    "queues": "headgate_api:queue-list",
    "quarantine": "headgate_api:quarantine-list",
    "workflows": "headgate_api:workflow-list",
    "durable_executions": "headgate_api:execution-list",
    "workers": "headgate_api:worker-list",
    "schedules": "headgate_api:schedule-list",
    "rate_classes": "headgate_api:rate-class-list",
    "concurrency_limits": "headgate_api:concurrency-limit-list",
    "backpressure": "headgate_api:backpressure-list",
    "queue_weights": "headgate_api:queue-weight-list",
    "fairness": "headgate_api:fairness-list",
    "healthz": "headgate_api:healthz",
    "readyz": "headgate_api:readyz",
    "meta": "headgate_api:meta",
    "schema": "headgate_api:schema",
    "docs": "headgate_api:docs",
    "redoc": "headgate_api:redoc",
}


class IndexView(HeadgateAPIView):
    """The API's root: its version and a link to each collection and page."""

    permission_classes = [IsAuthenticated]

    @document(exclude=True)
    def get(self, request: Request) -> Response:
        links = {name: request.build_absolute_uri(reverse(url)) for name, url in _LINKS.items()}
        return Response({"version": __version__, "links": links})


class _RedirectKeepingMethod(HttpResponsePermanentRedirect):
    status_code = 308


@csrf_exempt
def strip_slash(request: HttpRequest, path: str, **kwargs: Any) -> HttpResponse:
    """``…/jobs/`` → ``…/jobs`` when that route exists; the envelope's 404 otherwise.

    Exempt from Django's CSRF check, like every API view: a token-authenticated POST must
    get its redirect, not Django's HTML 403. It changes nothing, and the route it sends
    the request on to checks CSRF itself for a session user (DRF's SessionAuthentication).
    """
    try:
        # The URLconf matches the path without the script prefix, as Django's own
        # resolution does.
        match = resolve(request.path_info[:-1])
    except Resolver404:
        return not_found(request)
    if match.func is not_found or match.func is strip_slash:
        return not_found(request)
    # The path arrives percent-decoded: encoded again, an id holding ``?``, ``#`` or
    # ``%`` names the same resource in the Location (``abc%3Fx/`` → ``abc%3Fx``, not the
    # job ``abc`` with a query string).
    target = escape_uri_path(request.path[:-1])
    query = request.META.get("QUERY_STRING", "")
    return _RedirectKeepingMethod(f"{target}?{query}" if query else target)


@csrf_exempt
def add_slash(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    """``…/docs`` → ``…/docs/``: the schema and docs pages end in a slash, the API's
    routes do not, and a person typing the page's name should land on it. Exempt from
    Django's CSRF check as :func:`strip_slash` is, for the same reason: a token's request
    gets the redirect, and its answer there, not Django's HTML 403."""
    target = escape_uri_path(request.path) + "/"
    query = request.META.get("QUERY_STRING", "")
    return _RedirectKeepingMethod(f"{target}?{query}" if query else target)

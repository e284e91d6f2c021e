"""Console and API list reads from a read replica: ``HEADGATE["READ_REPLICA"]``.

A busy job table makes its list pages the largest reads a deployment does; a replica can
take them off the primary. Install the middleware and the router, and name the replica's
``DATABASES`` alias::

    MIDDLEWARE = [..., "headgate_django.replicas.ReplicaReadsMiddleware"]
    DATABASE_ROUTERS = ["headgate_django.replicas.ReplicaRouter"]
    HEADGATE = {"READ_REPLICA": "replica"}

What reads from the replica: while the middleware serves a ``GET`` or ``HEAD`` request to
the control API (``/api/v1/…``) or to a console page under the admin (the job,
workflow, schedule, … lists and detail pages), the ORM reads of headgate's models that
name no database (the API's querysets, the admin's changelists and change views).

What never does: anything outside such a request (workers, claims, fenced writes,
maintenance duties, ``enqueue``), every write (``db_for_write`` is left to the project),
every ``POST``/``PUT``/``PATCH``/``DELETE`` and what it reads (idempotency records, the
rows a mutation checks), and the store's own verbs, which name their database: the
queue dashboards' aggregates and the live pages' snapshots over WebSockets read the
primary. So a replica's lag can make a list or a job page show a job as it was up to
that lag ago; it can never make a worker run a job twice, lose a lease, or replay a
mutation.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from headgate_django.conf import headgate_settings

APP_LABEL = "headgate_django"
_reading_from: ContextVar[str | None] = ContextVar("headgate_replica_reads", default=None)
_SAFE = ("GET", "HEAD")


def replica_reads_alias() -> str | None:
    """The alias this context reads headgate's models from, or None for the default."""
    return _reading_from.get()


def serves_console_or_api(path: str) -> bool:
    """Whether ``path`` is the control API's or a headgate page of the admin."""
    try:
        match = resolve(path)
    except Resolver404:
        return False
    if "headgate_api" in match.namespaces:
        return True
    return "admin" in match.namespaces and (match.url_name or "").startswith(f"{APP_LABEL}_")


class ReplicaReadsMiddleware:
    """Marks a safe request to the console or the API, for :class:`ReplicaRouter`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        alias = headgate_settings.READ_REPLICA
        if alias is None or request.method not in _SAFE:
            return self.get_response(request)
        if not serves_console_or_api(request.path_info):
            return self.get_response(request)
        token = _reading_from.set(alias)
        try:
            return self.get_response(request)
        finally:
            _reading_from.reset(token)


class ReplicaRouter:
    """Sends headgate's ORM reads to the replica inside a marked request; else no opinion."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label != APP_LABEL:
            return None
        return _reading_from.get()

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return None

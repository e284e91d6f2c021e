"""Who may see what in the console; one place, shared by the pages and the WebSockets.

The console is staff only, like the admin it lives in, and each page also needs the
admin's view permission on the model it shows, so a staff member who cannot open the
job changelist cannot read the same rows through a graph either. User data (payloads,
results, signal payloads, durable values) follows the rule of
:mod:`headgate_django.visibility`, the same as the API's.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_backends
from django.contrib.auth.models import AnonymousUser

VIEW_JOBS = "headgate_django.view_job"
#: DAG workflows (their coordinators' state, history and signal emissions), as the API's
#: ``/workflows`` routes ask for it.
VIEW_WORKFLOWS = "headgate_django.view_workflowcheckpoint"
VIEW_EXECUTIONS = "headgate_django.view_execution"
VIEW_WORKERS = "headgate_django.view_worker"
VIEW_SCHEDULES = "headgate_django.view_schedule"
#: Queue switches and admission policies, as the API's ``/admission`` routes ask for it.
VIEW_QUEUE_STATE = "headgate_django.view_queuestate"


def is_console_user(user: Any, permission: str = VIEW_JOBS) -> bool:
    """Active staff holding ``permission`` (superusers hold every permission)."""
    return bool(
        user is not None
        and getattr(user, "is_authenticated", False)
        and user.is_active
        and user.is_staff
        and user.has_perm(permission)
    )


def storable(*texts: str) -> bool:
    """False when a text holds NUL. No stored id, name or filter value does, and PostgreSQL
    refuses NUL in a query, so a page or socket asked for one answers "no such thing"
    before it reads (instead of failing in the database)."""
    return not any("\x00" in text for text in texts)


def session_now(session: Any) -> Any:
    """The scope's session read again from its store (a logout or an expiry since it was
    read shows), or None when the scope has none."""
    key = getattr(session, "session_key", None) if session is not None else None
    if key is None:
        return None
    return import_module(settings.SESSION_ENGINE).SessionStore(key)


def reloaded(user: Any) -> Any:
    """``user`` as the authentication backends load it now (a scope without a session,
    whose user some middleware set), with fresh permissions; anonymous once no backend
    gives it (deleted, or deactivated where the backend refuses inactive users)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return user
    for backend in get_backends():
        fresh = backend.get_user(user.pk)
        if fresh is not None:
            return fresh
    return AnonymousUser()

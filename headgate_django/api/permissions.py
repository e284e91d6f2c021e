"""Who may do what through the API: Django model permissions, checked per view.

- every route needs an authenticated user;
- a read (GET/HEAD) needs the view permission of the resource's model;
- a mutation needs its change permission, or the dedicated ``headgate_django.operate``
  (one grant for an operator role, instead of change on every model);
- user data (payloads, results, checkpoints, signal payloads, durable values) needs
  ``headgate_django.view_job_payload`` on top of the read, by the one rule of
  :mod:`headgate_django.visibility` that the console follows too: a route that is nothing
  but user data refuses (403), other answers null those fields and say ``redacted``;
- with ``HEADGATE["API_READ_ONLY"]`` every mutation is refused (403 ``read_only``) for
  everybody, superusers included, so a read-only deployment cannot be talked out of it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from headgate_django.api.errors import PayloadPermissionRequired, ReadOnlyMode
from headgate_django.conf import headgate_settings
from headgate_django.visibility import may_see_payloads

OPERATE = "headgate_django.operate"


def model_permission(model: type[Model], action: str) -> str:
    return f"{model._meta.app_label}.{action}_{model._meta.model_name}"


class IsAuthenticated(BasePermission):
    """Any authenticated user (health and meta routes)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated)


class HeadgateModelPermission(IsAuthenticated):
    """Reads: view permission of ``view.permission_model``; mutations: change or operate."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        model: type[Model] = view.permission_model
        user = request.user
        if request.method in SAFE_METHODS:
            return bool(user.has_perm(model_permission(model, "view")))
        if headgate_settings.API_READ_ONLY:
            raise ReadOnlyMode()
        return bool(user.has_perm(model_permission(model, "change")) or user.has_perm(OPERATE))


def require_payload_permission(request: Request) -> None:
    """For routes whose whole answer is user data: 403 without the reveal permission."""
    if not may_see_payloads(request.user):
        raise PayloadPermissionRequired()

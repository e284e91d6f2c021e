"""Health and description: ``healthz`` (process), ``readyz`` (database), ``meta``.

``healthz`` never touches the database, so a struggling database does not get a liveness
probe restarting healthy processes. Like every route it needs authentication, and session
or token authentication reads the database; set ``HEADGATE["API_PUBLIC_HEALTH"] = True``
to serve ``healthz`` and ``readyz`` without authentication (and so without any query for
``healthz``).
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django import __version__
from headgate_django.api.base import HeadgateAPIView
from headgate_django.api.errors import DatabaseUnavailable
from headgate_django.api.pagination import MAX_LIMIT
from headgate_django.api.permissions import IsAuthenticated
from headgate_django.api.schema import document
from headgate_django.api.serializers.ops import MetaSerializer, StatusSerializer
from headgate_django.conf import headgate_settings
from headgate_django.kernel.workflow import MAX_HISTORY
from headgate_django.store.reads import database_ping
from headgate_django.store.signals import KEEP_PER_WORKFLOW


class _HealthView(HeadgateAPIView):
    def get_authenticators(self) -> list[BaseAuthentication]:
        if headgate_settings.API_PUBLIC_HEALTH:
            return []
        return super().get_authenticators()

    def get_permissions(self) -> list[BasePermission]:
        if headgate_settings.API_PUBLIC_HEALTH:
            return [AllowAny()]
        return [IsAuthenticated()]


class HealthzView(_HealthView):
    """Liveness: answers without touching the database."""

    @document(
        responses={200: StatusSerializer}, summary="Liveness: the process answers (no database)"
    )
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadyzView(_HealthView):
    """Readiness: one ``SELECT 1``; 503 ``database_unavailable`` when it fails."""

    @document(
        responses={200: StatusSerializer},
        summary="Readiness: one cheap database round trip; 503 when the database is down",
    )
    def get(self, request: Request) -> Response:
        try:
            database_ping()
        except DatabaseError as exc:
            raise DatabaseUnavailable(reason=type(exc).__name__) from exc
        return Response({"status": "ready"})


class MetaView(HeadgateAPIView):
    """What this server is: version, database vendor, capabilities and limits."""

    permission_classes = [IsAuthenticated]

    @document(responses={200: MetaSerializer}, summary="Version, database, capabilities, limits")
    def get(self, request: Request) -> Response:
        return Response(meta())


def meta() -> dict[str, Any]:
    vendor = connection.vendor
    capabilities = ["transactional", "inspect", "aggregation", "workflows", "durable"]
    if vendor != "sqlite":
        capabilities.append("skip_locked")
    if vendor == "postgresql" and headgate_settings.LISTEN_NOTIFY:
        capabilities.append("notifying")
    return {
        "version": __version__,
        "database": vendor,
        "capabilities": sorted(capabilities),
        "limits": {
            "max_page_size": MAX_LIMIT,
            "max_body_bytes": headgate_settings.API_MAX_BODY_BYTES,
            "max_payload_bytes": headgate_settings.MAX_PAYLOAD_BYTES,
            "max_batch": headgate_settings.MAX_BATCH,
            "idempotency_ttl_s": int(headgate_settings.IDEMPOTENCY_TTL.total_seconds()),
            "signal_history": KEEP_PER_WORKFLOW,
            "workflow_events": MAX_HISTORY,
        },
        "read_only": bool(headgate_settings.API_READ_ONLY),
    }

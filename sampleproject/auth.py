"""The demo's operator port: API requests that reach the sample project on the loopback
port ``rundemo`` opens for them are authenticated as the demo operator.

The workflow guide recommends authenticating the control API upstream (a proxy or a
service mesh in front of it) and its curl commands carry no credentials. This class stands
in for that upstream so those commands run as written against ``make demo``. It is an
explicit opt-in, ``HEADGATE_DEMO_OPERATOR = True`` (``make demo`` sets it), and applies
only to the port named by ``DEMO_OPERATOR_PORT`` and only to callers on the loopback
interface, where ``rundemo`` binds that port. On that port it refuses, rather than lets
through to other authentication:

- every request while ``DEBUG`` is off (system check ``headgate.E007`` refuses the
  configuration too);
- a request carrying a proxy's headers (``Forwarded``, ``X-Forwarded-For``,
  ``X-Real-IP``): behind a reverse proxy on the same host every caller arrives from the
  loopback address, so it would make everyone the operator.

Do not copy it into a deployment: there, the identity must come from something that
checked it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

OPERATOR = "operator"
LOOPBACK = {"127.0.0.1", "::1"}
PROXY_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP")


def demo_operator_enabled() -> bool:
    """The explicit opt-in, honoured only in development (``DEBUG`` on)."""
    return bool(getattr(settings, "HEADGATE_DEMO_OPERATOR", False)) and bool(settings.DEBUG)


class OperatorPortAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        port = getattr(settings, "DEMO_OPERATOR_PORT", None)
        meta = request.META
        if not (getattr(settings, "HEADGATE_DEMO_OPERATOR", False) and port):
            return None
        if meta.get("SERVER_PORT") != str(port):
            return None
        if not demo_operator_enabled():
            raise AuthenticationFailed("the demo operator port works only with DEBUG on")
        if any(meta.get(header) for header in PROXY_HEADERS):
            raise AuthenticationFailed("the demo operator port refuses proxied requests")
        if meta.get("REMOTE_ADDR") not in LOOPBACK:
            return None
        user = get_user_model().objects.filter(username=OPERATOR, is_active=True).first()
        if user is None:
            raise AuthenticationFailed("no demo operator user: run `manage.py demo` first")
        return user, None

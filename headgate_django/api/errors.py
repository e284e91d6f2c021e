"""One error envelope for every 4xx and 5xx the API produces, mapped in one place.

Every failure — a Headgate exception from the store, DRF's own (validation, 401/403,
405, 406, 415, 429), Django's (404, a request past its size or field-count limits) or a
database that is down — becomes::

    {"error": {"code": "revision_conflict", "message": "…", "detail": {…} | null}}

Exception classes carry ``status_code`` and ``default_code`` (the STYLE rule), so adding
an error never means adding a branch here. The classes below are the API's own errors;
the store's are in :mod:`headgate_django.exceptions`.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from headgate_django.exceptions import HeadgateError

log = logging.getLogger("headgate_django.api")


class ApiError(HeadgateError):
    """The request was refused."""

    status_code = 400
    default_code = "invalid_request"


class InvalidQueryParameter(ApiError):
    """A query parameter is invalid.

    ``detail`` has the shape of a body's validation errors, keyed by the parameter:
    ``{"limit": ["limit must be an integer from 1 to 200"]}``, so a client reads both the
    same way. Raise it with :meth:`of`.
    """

    default_code = "invalid_query_parameter"

    @classmethod
    def of(cls, parameter: str, message: str) -> InvalidQueryParameter:
        return cls(message, **{parameter: [message]})


class IdempotencyKeyRequired(ApiError):
    """This mutation needs an Idempotency-Key header (1–255 visible ASCII characters)."""

    default_code = "idempotency_key_required"


class IdempotencyKeyReused(ApiError):
    """This Idempotency-Key was already used for a different request."""

    status_code = 409
    default_code = "idempotency_key_reused"


class ReadOnlyMode(ApiError):
    """The API is in read-only mode: mutations are refused."""

    status_code = 403
    default_code = "read_only"


class PayloadPermissionRequired(ApiError):
    """Reading user data (payloads, results, checkpoints, history) needs the
    headgate_django.view_job_payload permission."""

    status_code = 403
    default_code = "payload_permission_required"


class RequestTooLarge(ApiError):
    """The request body is larger than the API accepts."""

    status_code = 413
    default_code = "request_too_large"


class TooManyFields(ApiError):
    """The request has more query parameters, form fields or files than the API accepts."""

    default_code = "too_many_fields"


class UnsupportedMediaType(ApiError):
    """A request body must be JSON (Content-Type: application/json)."""

    status_code = 415
    default_code = "unsupported_media_type"


class UnknownQueue(ApiError):
    """No job, task or switch uses this queue; pass ``?create=true`` to pause it anyway."""

    status_code = 404
    default_code = "unknown_queue"


class NoResult(ApiError):
    """The job has no result: it has not completed."""

    status_code = 404
    default_code = "no_result"


class DatabaseUnavailable(ApiError):
    """The database is unavailable; retry later."""

    status_code = 503
    default_code = "database_unavailable"


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "detail": detail}}


def _drf_code(exc: drf.APIException) -> str:
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def classify(exc: BaseException) -> tuple[int, str, str, Any, dict[str, str]]:
    """``exc`` → (status, code, message, detail, headers). The one mapping table."""
    headers: dict[str, str] = {}
    if isinstance(exc, HeadgateError):
        headers = _retry() if exc.status_code == 503 else {}
        return exc.status_code, exc.default_code, exc.message, exc.details or None, headers
    if isinstance(exc, drf.ValidationError):
        return 400, "invalid", "The request is invalid.", exc.detail, {}
    if isinstance(exc, drf.APIException):
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
        return exc.status_code, _drf_code(exc), str(exc.detail), None, headers
    if isinstance(exc, Http404):
        return 404, "not_found", "Not found.", None, {}
    if isinstance(exc, DjangoPermissionDenied):
        return 403, "permission_denied", "You do not have permission.", None, {}
    if isinstance(exc, RequestDataTooBig):
        return 413, "request_too_large", RequestTooLarge.__doc__ or "", None, {}
    # Django's refusal of a request past DATA_UPLOAD_MAX_NUMBER_FIELDS / _FILES: the
    # client's fault, raised by the first read of request.GET, before authentication.
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return 400, "too_many_fields", TooManyFields.__doc__ or "", None, {}
    if isinstance(exc, OperationalError | InterfaceError):
        return 503, "database_unavailable", DatabaseUnavailable.__doc__ or "", None, _retry()
    if isinstance(exc, DataError):
        return 400, "invalid_value", "The database refused a value in the request.", None, {}
    if isinstance(exc, IntegrityError):
        return 409, "conflict", "The request conflicts with stored data.", None, {}
    return 500, "internal_error", "An unexpected error occurred.", None, {}


def _retry() -> dict[str, str]:
    return {"Retry-After": "1"}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's exception-handler hook, installed on every API view (not project-wide)."""
    status, code, message, detail, headers = classify(exc)
    if status >= 500:
        log.error("API %s: %s", code, exc, exc_info=status == 500)
    set_rollback()
    return Response(error_body(code, message, detail), status=status, headers=headers)


@csrf_exempt  # a 404 must stay a 404 (not a CSRF 403) for a cookie-carrying POST
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Unknown routes under the API prefix get the envelope, not Django's HTML 404."""
    return JsonResponse(error_body("not_found", "No API route matches this URL."), status=404)

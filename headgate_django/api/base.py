"""What every API view shares: JSON in and out, permissions, checks on mutations, errors.

The project's DRF settings still decide authentication (``REST_FRAMEWORK
["DEFAULT_AUTHENTICATION_CLASSES"]``, or ``HEADGATE["API_AUTHENTICATION_CLASSES"]`` for
this API alone) and throttling. What must not vary with a project's other APIs is fixed
here: the error envelope, JSON-only bodies, the permission rules and the mutation checks
(413, 415, ``Idempotency-Key``), which run after authentication and permissions so an
anonymous or forbidden caller learns nothing more than 401/403.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from django.http import Http404
from django.utils.module_loading import import_string
from rest_framework import parsers, renderers
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotAcceptable, ParseError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet, ViewSet

from headgate_django.api import errors, idempotency
from headgate_django.api.permissions import HeadgateModelPermission
from headgate_django.api.schema import HeadgateAutoSchema
from headgate_django.conf import headgate_settings


class JSONParser(parsers.JSONParser):
    """DRF's parser, refusing what no database can store the same way.

    A NUL character or an unpaired surrogate in a string is valid JSON text, but
    PostgreSQL refuses the first and every driver fails to encode the second; refusing them
    here makes the API behave the same on every database. A pathologically nested body is
    a 400 too, not a ``RecursionError``.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
            _check_strings(data)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        return data


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _check_strings(value: Any) -> None:
    if isinstance(value, str):
        if _UNSTORABLE.search(value):
            raise ParseError("JSON strings must not contain NUL or unpaired surrogates")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


#: What a path segment naming a resource (job, queue, workflow, node …) may contain. No
#: stored id has control characters, so a segment with one is an unknown route (404)
#: instead of a query PostgreSQL would refuse.
ID_REGEX = r"[^/\x00-\x1f]+"


@lru_cache(maxsize=8)
def _classes(paths: tuple[str, ...]) -> list[type[BaseAuthentication]]:
    return [import_string(p) for p in paths]


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


class HeadgateViewMixin:
    """The rules every API view shares, whatever DRF class it builds on."""

    renderer_classes = [renderers.JSONRenderer]
    parser_classes = [JSONParser]
    permission_classes = [HeadgateModelPermission]
    # No OPTIONS: the OpenAPI schema is the description (CORS preflights are answered by
    # middleware before a view runs). Allow headers then list only real methods.
    http_method_names = ["get", "post", "put", "delete", "head"]
    metadata_class = None
    schema = HeadgateAutoSchema()
    #: The model whose view/change permissions guard this view.
    permission_model: Any = None

    def get_authenticators(self) -> list[BaseAuthentication]:
        configured = headgate_settings.API_AUTHENTICATION_CLASSES
        if configured is None:
            return [auth() for auth in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
        return [auth() for auth in _classes(tuple(configured))]

    def get_throttles(self) -> list[BaseThrottle]:
        # Read per request (not frozen at import) so the project's setting, and a test's
        # override of it, apply.
        return [throttle() for throttle in api_settings.DEFAULT_THROTTLE_CLASSES]

    def get_exception_handler(self) -> Callable[..., Any]:
        return errors.exception_handler

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        """DRF answers a ``?format=`` no renderer has with a 404, which says that an
        existing route or object does not exist: it is the 406 an ``Accept`` of it gets."""
        try:
            return super().perform_content_negotiation(request, force)  # type: ignore[misc]
        except Http404:
            wanted = request.query_params.get(api_settings.URL_FORMAT_OVERRIDE or "")
            formats = sorted({r.format for r in self.get_renderers()})  # type: ignore[attr-defined]
            raise NotAcceptable(f"format {wanted!r} is not one of: {', '.join(formats)}") from None

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        """Every error envelope is ``application/json``, whatever the route renders when it
        succeeds (the schema's OpenAPI media types, the docs pages' HTML): a client reads
        an error the same way from every route."""
        if response.status_code >= 400 and isinstance(response, Response):
            request.accepted_renderer = renderers.JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        method = (request.method or "").lower()
        if request.method in SAFE_METHODS or not hasattr(self, method):
            return  # reads, and methods the route does not have (405 follows)
        self._check_body(request)
        key = idempotency.require_key(request)
        # DRF looks the handler up right after this method returns, so wrapping it here
        # puts every mutation of every view under the Idempotency-Key machinery, in one
        # place, after authentication and permissions — no view can forget it.
        handler = getattr(self, method)

        def idempotent(*h_args: Any, **h_kwargs: Any) -> Any:
            return idempotency.run_idempotent(request, key, lambda: handler(*h_args, **h_kwargs))

        setattr(self, method, idempotent)

    @staticmethod
    def _check_body(request: Request) -> None:
        meta = request._request.META
        try:
            length = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise errors.ApiError("Content-Length is not a number") from None
        limit = headgate_settings.API_MAX_BODY_BYTES
        if length > limit:
            raise errors.RequestTooLarge(
                f"the request body is {length} bytes; the limit is {limit}",
                size=length,
                limit=limit,
            )
        if length and not _is_json(meta.get("CONTENT_TYPE", "")):
            raise errors.UnsupportedMediaType()
        if len(request._request.body) > limit:  # a body that lied about its length
            raise errors.RequestTooLarge(limit=limit)


class HeadgateAPIView(HeadgateViewMixin, APIView):
    pass


class HeadgateViewSet(HeadgateViewMixin, ViewSet):
    pass


class HeadgateGenericViewSet(HeadgateViewMixin, GenericViewSet):
    pass

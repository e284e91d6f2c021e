"""Cursor pagination with a strict ``limit`` (1–200) and an opaque ``next_cursor``.

Keyset cursors stay fast on a million-row job table and do not skip or repeat rows while
jobs are inserted, which offset pagination cannot promise. Responses name their
collection (``{"jobs": […], "next_cursor": "…"}``), as Headgate's API does. A malformed
``limit`` or ``cursor`` is a 400, not silently the default page or a 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api.errors import InvalidQueryParameter

MAX_LIMIT = 200
BAD_CURSOR = "cursor is not a cursor this API returned"


def parse_limit(request: Request, default: int, maximum: int = MAX_LIMIT) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidQueryParameter(f"limit must be an integer from 1 to {maximum}") from None
    if not 1 <= value <= maximum:
        raise InvalidQueryParameter(f"limit must be an integer from 1 to {maximum}")
    return value


def limit_parameter(default: int, maximum: int = MAX_LIMIT) -> OpenApiParameter:
    return OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": maximum, "default": default},
        description=f"Page size, 1–{maximum} (default {default}).",
    )


class HeadgateCursorPagination(CursorPagination):
    """Subclass per collection with ``collection_key`` and ``ordering``."""

    collection_key = "results"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = MAX_LIMIT
    ordering: Any = "-pk"

    def get_page_size(self, request: Request) -> int:
        return parse_limit(request, self.page_size, self.max_page_size)

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise InvalidQueryParameter(BAD_CURSOR) from None
        if cursor is not None and any(ord(c) < 32 for c in cursor.position or ""):
            raise InvalidQueryParameter(BAD_CURSOR)  # would reach SQL as a NUL byte
        return cursor

    def encode_cursor(self, cursor: Cursor) -> str:
        """The bare token (not a URL): clients pass it back as ``?cursor=``."""
        from base64 import b64encode
        from urllib import parse

        tokens = {}
        if cursor.offset != 0:
            tokens["o"] = str(cursor.offset)
        if cursor.reverse:
            tokens["r"] = "1"
        if cursor.position is not None:
            tokens["p"] = cursor.position
        return b64encode(parse.urlencode(tokens, doseq=True).encode("ascii")).decode("ascii")

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        try:
            return super().paginate_queryset(queryset, request, view)
        except DjangoValidationError:  # a hand-made cursor whose position is not a value
            raise InvalidQueryParameter(BAD_CURSOR) from None

    def get_paginated_response(self, data: Sequence[Any]) -> Response:
        return Response({self.collection_key: data, "next_cursor": self.get_next_link()})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": [self.collection_key, "next_cursor"],
            "properties": {
                self.collection_key: schema,
                "next_cursor": {
                    "type": "string",
                    "nullable": True,
                    "description": "Pass as `cursor` for the next page; null on the last page.",
                },
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": "cursor",
                "required": False,
                "in": "query",
                "description": "Opaque cursor from a previous page's `next_cursor`.",
                "schema": {"type": "string"},
            },
            {
                "name": "limit",
                "required": False,
                "in": "query",
                "description": f"Page size, 1–{self.max_page_size} (default {self.page_size}).",
                "schema": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                    "default": self.page_size,
                },
            },
        ]


def cursor_pagination(key: str, ordering: Sequence[str], page_size: int = 50) -> type:
    return type(
        f"{key.title()}CursorPagination",
        (HeadgateCursorPagination,),
        {"collection_key": key, "ordering": tuple(ordering), "page_size": page_size},
    )

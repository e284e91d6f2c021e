"""Cursor pagination with a strict ``limit`` (1–200) and an exact ``next_cursor``.

Keyset cursors stay fast on a million-row job table and do not skip or repeat rows while
jobs are inserted, which offset pagination cannot promise. Responses name their
collection (``{"jobs": […], "next_cursor": "…"}``), as Headgate's API does.

A cursor is ``<collection>:<key of the last row>`` (``jobs:01JB…``): the collections are
ordered by a unique key, so the key alone says where the next page starts (DRF's offset
and reverse tokens are never needed). Clients treat it as opaque. The grammar is exact, so
the schema can state it and the API can hold to it: a cursor of another collection, one
that is empty or has control characters, or anything else (``AAAA``, DRF's base64 form)
is a 400 naming ``cursor``, never silently the first page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api import query
from headgate_django.api.errors import InvalidQueryParameter
from headgate_django.kernel.names import MAX_ID_BYTES

MAX_LIMIT = 200
BAD_CURSOR = "cursor is not a cursor this API returned"


def limit_param(default: int, maximum: int = MAX_LIMIT) -> query.QueryParam:
    return query.integer(
        "limit", 1, maximum, f"Page size, 1–{maximum} (default {default}).", default=default
    )


class HeadgateCursorPagination(CursorPagination):
    """Subclass per collection with ``collection_key`` and ``ordering``."""

    collection_key = "results"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = MAX_LIMIT
    ordering: Any = "-pk"

    def get_page_size(self, request: Request) -> int:
        return int(limit_param(self.page_size, self.max_page_size).read(request, self.page_size))

    def cursor_param(self) -> query.QueryParam:
        prefix = f"{self.collection_key}:"

        def parse(raw: str) -> Cursor:
            position = raw.removeprefix(prefix)
            if position == raw or not position or len(position) > MAX_ID_BYTES:
                raise ValueError(f"is not a cursor this API returned (`{prefix}…`)")
            return Cursor(offset=0, reverse=False, position=query.check_text(position))

        pattern = f"^{prefix}[^\\u0000-\\u001f]{{1,{MAX_ID_BYTES}}}$"
        return query.QueryParam(
            "cursor",
            {"type": "string", "pattern": pattern},
            parse,
            "`next_cursor` of the previous page.",
        )

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor: Cursor | None = self.cursor_param().read(request)
        return cursor

    def encode_cursor(self, cursor: Cursor) -> str:
        """The bare token (not a URL): clients pass it back as ``?cursor=``. The ordering
        key is unique, so DRF never needs an offset here."""
        return f"{self.collection_key}:{cursor.position}"

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        try:
            return super().paginate_queryset(queryset, request, view)
        except DjangoValidationError:  # a hand-made cursor whose position is not a value
            raise InvalidQueryParameter.of("cursor", BAD_CURSOR) from None

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
        limit = limit_param(self.page_size, self.max_page_size)
        return [
            {
                "name": p.name,
                "required": False,
                "in": "query",
                "description": p.description,
                "schema": p.schema,
            }
            for p in (self.cursor_param(), limit)
        ]


def cursor_pagination(key: str, ordering: Sequence[str], page_size: int = 50) -> type:
    return type(
        f"{key.title()}CursorPagination",
        (HeadgateCursorPagination,),
        {"collection_key": key, "ordering": tuple(ordering), "page_size": page_size},
    )

"""Query parameters: one declaration gives both the OpenAPI parameter and its strict reader.

The schema is a promise a client (and schemathesis) holds the API to, so every parameter
is read exactly as it is declared: a value the schema allows is accepted, anything else
is a 400 ``invalid_query_parameter`` naming the parameter. In particular an empty value
(``?limit=``) is an error, not the default, integers are plain ASCII digits, flags are one
of their listed spellings, and an enum's error lists the valid choices.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request

from headgate_django.api.errors import InvalidQueryParameter

#: Text a parameter may carry: no control characters (no stored name or id has one, and
#: PostgreSQL refuses NUL). The same rule as the request bodies' name fields.
TEXT_PATTERN = "^[^\\u0000-\\u001f]+$"
_CONTROL = re.compile("[\x00-\x1f]")
_DIGITS = re.compile("[0-9]+")
FLAG_TRUE = ("true", "1", "yes")
FLAG_FALSE = ("false", "0", "no")


@dataclass(frozen=True)
class QueryParam:
    """A declared query parameter: its OpenAPI schema and a strict parser for its value."""

    name: str
    schema: dict[str, Any]
    parse: Callable[[str], Any]
    description: str = ""

    def openapi(self) -> OpenApiParameter:
        return OpenApiParameter(self.name, self.schema, description=self.description)

    def read(self, request: Request, default: Any = None) -> Any:
        """The parsed value, ``default`` when absent; 400 when empty, repeated or invalid."""
        values = request.query_params.getlist(self.name)
        if not values:
            return default
        if len(values) > 1:
            raise InvalidQueryParameter.of(self.name, f"give {self.name} at most once")
        if values[0] == "":
            raise InvalidQueryParameter.of(self.name, f"{self.name} must not be empty")
        try:
            return self.parse(values[0])
        except ValueError as exc:
            raise InvalidQueryParameter.of(self.name, f"{self.name} {exc}") from None


def check_text(raw: str) -> str:
    if _CONTROL.search(raw):
        raise ValueError("must not contain control characters")
    return raw


def text(name: str, description: str = "") -> QueryParam:
    return QueryParam(name, {"type": "string", "pattern": TEXT_PATTERN}, check_text, description)


def choice(name: str, choices: Sequence[str], description: str = "") -> QueryParam:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(not_a_choice(raw, choices))
        return raw

    return QueryParam(name, {"type": "string", "enum": list(choices)}, parse, description)


def not_a_choice(raw: str, choices: Sequence[str]) -> str:
    return f"{raw[:64]!r} is not one of: {', '.join(choices)}"


def integer(
    name: str, minimum: int, maximum: int, description: str = "", **schema: Any
) -> QueryParam:
    def parse(raw: str) -> int:
        value = int(raw) if _DIGITS.fullmatch(raw) and len(raw) <= 20 else None
        if value is None or not minimum <= value <= maximum:
            raise ValueError(f"must be an integer from {minimum} to {maximum}")
        return value

    bounds = {"type": "integer", "minimum": minimum, "maximum": maximum, **schema}
    return QueryParam(name, bounds, parse, description)


def flag(name: str, description: str = "") -> QueryParam:
    def parse(raw: str) -> bool:
        if raw in FLAG_TRUE:
            return True
        if raw in FLAG_FALSE:
            return False
        raise ValueError(f"must be one of: {', '.join(FLAG_TRUE + FLAG_FALSE)}")

    schema = {"type": "string", "enum": [*FLAG_TRUE, *FLAG_FALSE]}
    return QueryParam(name, schema, parse, description)


@dataclass(frozen=True)
class RepeatedParam(QueryParam):
    """A parameter that may be given any number of times (``?arg=a&arg=b``), read in order."""

    def openapi(self) -> OpenApiParameter:
        schema = {"type": "array", "items": self.schema}
        return OpenApiParameter(
            self.name, schema, style="form", explode=True, description=self.description
        )

    def read(self, request: Request, default: Any = None) -> list[Any]:
        values = []
        for raw in request.query_params.getlist(self.name):
            if raw == "":
                raise InvalidQueryParameter.of(self.name, f"{self.name} must not be empty")
            try:
                values.append(self.parse(raw))
            except ValueError as exc:
                raise InvalidQueryParameter.of(self.name, f"{self.name} {exc}") from None
        return values


def json_or_text(name: str, description: str = "") -> RepeatedParam:
    """Values read as JSON when they parse as JSON (``3``, ``"3"``, ``[1]``), otherwise
    taken as text (``tea``): every value the schema allows means something. JSON nested
    too deeply for the parser is a 400, as in a body: read as text instead, it would mean
    something other than what the caller sent."""

    def parse(raw: str) -> Any:
        check_text(raw)
        try:
            return json.loads(raw, parse_constant=_not_json)
        except ValueError:
            return raw
        except RecursionError:
            raise ValueError("is nested too deeply to read as JSON") from None

    schema = {"type": "string", "pattern": TEXT_PATTERN}
    return RepeatedParam(name, schema, parse, description)


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")

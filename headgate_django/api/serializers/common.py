"""Field types the resources share: base64 bytes, bounded instants, names, any JSON, and
the strict request body, and the base of every shape that carries user data."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from headgate_django.kernel.names import (
    INTERNAL_PREFIX,
    MAX_KIND_BYTES,
    MAX_QUEUE_BYTES,
    NAME_PATTERN,
    trimmed_name_pattern,
)
from headgate_django.visibility import may_see_payloads

INT32_MAX = 2**31 - 1
MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000  # ten years


@extend_schema_field({"type": "string", "format": "byte"})
class Base64Field(serializers.Field):
    """Bytes as standard base64 (what Headgate's API uses for payloads)."""

    default_error_messages = {"invalid": "Not valid base64."}

    def to_internal_value(self, data: Any) -> bytes:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            return base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            self.fail("invalid")
        raise AssertionError("unreachable")

    def to_representation(self, value: Any) -> str:
        return base64.b64encode(bytes(value)).decode("ascii")


#: RFC 3339 (what OpenAPI's ``date-time`` means): a date, a time and an offset. Python's
#: parser alone also takes a bare date or a naive time, which the schema does not allow.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", re.ASCII)
#: Every instant the store holds or acts on lies in this range (every database stores
#: it). An instant outside is moved to its edge, which means the same to a filter (no row
#: lies outside) and to a schedule (long due, or never).
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, tzinfo=UTC)


def parse_instant(text: str) -> datetime | None:
    """An RFC 3339 instant clamped to 1970–9998; None when ``text`` is not one."""
    if not _RFC3339.fullmatch(text):
        return None
    year = int(text[:4])  # year 0, and year 1 at +14:00, do not even parse
    if year < EARLIEST.year:
        return EARLIEST
    if year > LATEST.year:
        return LATEST
    try:
        result = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:  # 30 February, hour 24
        return None
    # In UTC: RFC 3339 allows offsets up to ±23:59, PostgreSQL only up to ±15:59.
    return min(max(result.astimezone(UTC), EARLIEST), LATEST)


class InstantField(serializers.DateTimeField):
    """An RFC 3339 instant, clamped to the range every database stores (1970–9998)."""

    def to_internal_value(self, value: Any) -> datetime:
        result = parse_instant(value) if isinstance(value, str) else None
        if result is None:
            raise serializers.ValidationError("must be an RFC 3339 date-time with an offset")
        return result


@extend_schema_field(OpenApiTypes.ANY)
class AnyJSONField(serializers.JSONField):
    """Any JSON value, null included (the parser has already refused NUL and lone
    surrogates)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


#: No control characters; drf-spectacular states it as the field's ``pattern``.
NO_CONTROL = RegexValidator(r"^[^\x00-\x1f]*\Z", "control characters are not allowed")
NO_CONTROL_OR_SLASH = RegexValidator(
    r"^[^/\x00-\x1f]*\Z", "control characters and / are not allowed"
)
#: A queue or rate class name, stated as the field's ``pattern`` too: a name the store
#: would refuse is refused by the schema as well, not only by the body's validation.
SIMPLE_NAME = RegexValidator(
    f"^{NAME_PATTERN}", "letters, digits and _-.: only, a letter, digit or _ first"
)


class NameField(serializers.CharField):
    """A short identifier (node, signal, queue …): no control characters, taken exactly
    as sent (not trimmed: ``" a"`` is not silently ``"a"``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 255)
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("validators", [NO_CONTROL])
        super().__init__(**kwargs)


class RouteIdField(NameField):
    """An id the caller chooses for something the API then addresses by it in a path
    (``/jobs/{id}``, ``/durable/executions/{id}``): no ``/``, which no route could match."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("validators", [NO_CONTROL_OR_SLASH])
        super().__init__(**kwargs)


class QueueField(NameField):
    """A queue name. The envelope refuses one outside the grammar of every queue
    (``validate_queue``: 422 ``invalid_definition``); the schema states that grammar as
    the field's ``pattern`` (see ``schema_rules``), so it allows no name that is refused."""

    schema_rules: ClassVar[dict[str, Any]] = {
        "pattern": "^" + NAME_PATTERN.removesuffix(r"\Z") + "$"
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_QUEUE_BYTES)  # the grammar is ASCII: bytes
        super().__init__(**kwargs)


class KindField(NameField):
    """A job kind a caller names; never an internal one (422 ``internal_kind``), which the
    schema states as ``not: {pattern}`` (see ``schema_rules``)."""

    #: JSON Schema keywords the API schema adds to this field's own.
    schema_rules: ClassVar[dict[str, Any]] = {"not": {"pattern": f"^{INTERNAL_PREFIX}"}}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_KIND_BYTES)
        super().__init__(**kwargs)


class DurableNameField(NameField):
    """A durable workflow's name or version, a signal, a key or an id of the durable
    runtime, which refuses whitespace at either end (``check_name``): refused here, and
    stated as the field's ``pattern``, so a request the schema allows is not a 422."""

    def __init__(self, *, also_refused: str = "", **kwargs: Any) -> None:
        pattern = trimmed_name_pattern(also_refused)
        message = "no control characters and no whitespace at either end"
        if also_refused:
            message += f", and no {also_refused}"
        kwargs.setdefault("validators", [RegexValidator(f"^{pattern}", message)])
        super().__init__(**kwargs)


class RequestSerializer(serializers.Serializer):
    """A request body, as strict as its schema says.

    Unknown fields are refused (400 naming them) and the schema says so
    (``additionalProperties: false``): a misspelt option must not be dropped silently.
    ``schema_rules`` are the JSON Schema keywords (``oneOf``, ``not`` …) stating the
    cross-field rules ``validate`` enforces; :mod:`headgate_django.api.schema` adds them.
    """

    schema_rules: ClassVar[dict[str, Any]] = {}
    #: The body must be sent even though no single field is required (``oneOf`` rules).
    body_required: ClassVar[bool] = False

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
            mistyped = {
                name: [error]
                for name, field in self.fields.items()
                if name in data and (error := _json_type_error(field, data[name]))
            }
            if mistyped:  # with the other fields' errors, as DRF reports them together
                try:
                    super().to_internal_value(data)
                except serializers.ValidationError as exc:
                    if isinstance(exc.detail, dict):
                        mistyped = {**exc.detail, **mistyped}
                raise serializers.ValidationError(mistyped)
        return super().to_internal_value(data)


def _json_type_error(field: serializers.Field, value: Any) -> str | None:
    """Why ``value`` lacks the JSON type the schema gives ``field``, or None. DRF alone would
    take ``1`` for a string, ``"1"`` for an integer and ``0`` for ``false``; the schema does
    not, so a request body does not either (null is the field's own ``allow_null``)."""
    if value is None:
        return None
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        errors = (_json_type_error(field.child, item) for item in value)
        return next((error for error in errors if error), None)
    if isinstance(field, serializers.BooleanField):
        fits = isinstance(value, bool)
    elif isinstance(field, serializers.IntegerField):
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(field, serializers.CharField):
        fits = isinstance(value, str)
    else:
        return None
    return None if fits else str(field.error_messages["invalid"])


def exactly_one(*names: str) -> dict[str, Any]:
    return {"oneOf": [{"required": [name]} for name in names]}


def not_together(name: str, *others: str) -> dict[str, Any]:
    """Schema: ``name`` may not come with any of ``others``."""
    return {"not": {"required": [name], "anyOf": [{"required": [o]} for o in others]}}


def needed_by(name: str, *others: str) -> dict[str, Any]:
    """Schema: any of ``others`` needs ``name`` too."""
    return {
        "anyOf": [{"required": [name]}, {"not": {"anyOf": [{"required": [o]} for o in others]}}]
    }


class RedactingSerializer(serializers.Serializer):
    """A shape with user data in ``private_fields`` (see :mod:`headgate_django.visibility`).

    For a caller without ``headgate_django.view_job_payload`` those fields are null and
    ``redacted`` is true; the shape is the same for everyone, so one schema holds. The
    decision reads the request from the serializer's context and, without one, redacts.
    """

    private_fields: ClassVar[tuple[str, ...]] = ()

    redacted = serializers.SerializerMethodField()

    @extend_schema_field(
        {
            "type": "boolean",
            "description": "True when the fields holding user data are null because the "
            "caller lacks `headgate_django.view_job_payload`.",
        }
    )
    def get_redacted(self, instance: Any) -> bool:
        request = self.context.get("request")
        return not may_see_payloads(getattr(request, "user", None))

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        if data["redacted"]:
            data.update(dict.fromkeys(self.private_fields))
        return data

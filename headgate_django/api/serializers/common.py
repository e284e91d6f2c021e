"""Field types the resources share: base64 bytes, bounded instants, names, any JSON, and
the base of every shape that carries user data."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any, ClassVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

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


class InstantField(serializers.DateTimeField):
    """An aware instant in a range every database stores (1970–9998)."""

    def to_internal_value(self, value: Any) -> datetime:
        try:
            result = super().to_internal_value(value)
        except OverflowError:
            self.fail("invalid", format="ISO 8601")
        if not 1970 <= result.year <= 9998:
            raise serializers.ValidationError("year must be between 1970 and 9998")
        return result


@extend_schema_field(OpenApiTypes.ANY)
class AnyJSONField(serializers.JSONField):
    """Any JSON value (the parser has already refused NUL and lone surrogates)."""


class NameField(serializers.CharField):
    """A short identifier (node, signal, queue …): no control characters."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 255)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if any(ord(c) < 32 for c in value):
            raise serializers.ValidationError("control characters are not allowed")
        return value


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

"""OpenAPI 3 generation (drf-spectacular): every route with its errors and headers.

Views declare their success responses with ``extend_schema``; this module adds what all of
them share, so no route can forget it: the error envelope for each status the API can
return, and the required ``Idempotency-Key`` header on mutations. The schema is generated
from the project's own URLconf (so paths carry the real mount prefix) and filtered to
this API's views, with settings passed per view instead of the project's
``SPECTACULAR_SETTINGS``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from headgate_django import __version__
from headgate_django.api.serializers.common import RequestSerializer

ERRORS: dict[str, str] = {
    "400": "Invalid request: validation failed, malformed JSON, a bad query parameter, or a "
    "mutation without a valid `Idempotency-Key` (`code` says which).",
    "401": "Not authenticated (the first configured authentication class names its scheme in "
    "`WWW-Authenticate`).",
    "403": "Authenticated but lacking the permission, or the API is in read-only mode "
    "(`read_only`), or payload reveal without `view_job_payload`.",
    "404": "No such resource or route (`not_found`, `unknown_task`, `no_result`).",
    "406": "`Accept` or `?format=` names no format the route renders (`not_acceptable`).",
    "409": "Conflict: `duplicate`, `id_conflict`, `revision_conflict`, `invalid_transition`, "
    "or `idempotency_key_reused` (the key was used for a different request).",
    "413": "Request body larger than `HEADGATE['API_MAX_BODY_BYTES']` (2 MiB), or a payload "
    "larger than its limit (`payload_too_large`).",
    "415": "The request has a body that is not JSON.",
    "422": "Well-formed but not acceptable: an invalid definition (queue name, kind, graph, "
    "limit), or an internal kind or job (`internal_kind`) — `code` names the rule.",
    "423": "The job's fingerprint is quarantined (`quarantined`, `detail.fingerprint`).",
    "429": "Throttled by the project's DRF throttling (`Retry-After`), or an enqueue refused by "
    "the queue's backpressure limit (`backpressure`, `detail.queue`, `detail.limit`, "
    "`detail.current`, `detail.incoming`).",
    "500": "Unclassified server error (`internal_error`); logged.",
    "503": "The database is unavailable (`database_unavailable`, `Retry-After`).",
}
F = TypeVar("F", bound=Callable[..., Any])
ALWAYS = ("400", "401", "403", "404", "406", "429", "500", "503")
MUTATION = ("409", "413", "415", "422", "423")

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=True,
    pattern=r"^[!-~]{1,255}$",
    description="Required on every mutation (1–255 visible ASCII characters). The same key with "
    "the same request replays the stored response byte for byte for "
    "`HEADGATE['IDEMPOTENCY_TTL']` (24 h); the same key with another request is a 409.",
)


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code.")
    message = serializers.CharField(help_text="Human-readable explanation.")
    detail = serializers.JSONField(
        allow_null=True, help_text="Structured context (field errors, ids, limits) or null."
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()

    class Meta:
        ref_name = "Error"


class HeadgateAutoSchema(AutoSchema):
    """Adds the error envelope per status, the ``Idempotency-Key`` header, and the
    strictness of request bodies (no unknown fields, the cross-field rules)."""

    def _map_basic_serializer(self, serializer: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        for name, field in serializer.fields.items():
            # drf-spectacular states a ListField's bounds but not a nested many=True one's.
            prop = schema["properties"].get(name)
            if prop is not None:
                prop.update(getattr(field, "schema_rules", {}))
            if isinstance(field, serializers.ListSerializer) and prop is not None:
                if field.min_length is not None:
                    prop["minItems"] = field.min_length
                if field.max_length is not None:
                    prop["maxItems"] = field.max_length
        if direction == "request" and isinstance(serializer, RequestSerializer):
            schema["additionalProperties"] = False
            schema.update(serializer.schema_rules)
        return schema

    def _get_request_for_media_type(self, serializer: Any, direction: Any = "request") -> Any:
        schema, required = super()._get_request_for_media_type(serializer, direction)
        return schema, required or getattr(serializer, "body_required", False)

    def get_description(self) -> str:
        """The action's docstring, else the view class's own (never one inherited from a
        base class, which would describe the plumbing instead of the route)."""
        action = getattr(self.view, getattr(self.view, "action", None) or "", None) or getattr(
            self.view, self.method.lower(), None
        )
        doc = getattr(action, "__doc__", None) or self.view.__class__.__dict__.get("__doc__")
        return inspect.cleandoc(doc) if doc else ""

    def _is_list_view(self, serializer: Any = None) -> bool:
        # A collection answered by a plain ViewSet (queues, workflows, executions) returns
        # one envelope object, not an array; only paginated querysets are "list views".
        if getattr(self.view, "action", None) == "list" and not getattr(
            self.view, "pagination_class", None
        ):
            return False
        return bool(super()._is_list_view(serializer))

    def get_operation_id(self) -> str:
        operation_id = str(super().get_operation_id())
        if getattr(self.view, "action", None) == "list" and operation_id.endswith("_retrieve"):
            return operation_id.removesuffix("_retrieve") + "_list"
        return operation_id

    def _is_mutation(self) -> bool:
        return self.method not in ("GET", "HEAD", "OPTIONS")

    def get_override_parameters(self) -> list[Any]:
        params = list(super().get_override_parameters())
        if self._is_mutation():
            params.append(IDEMPOTENCY_KEY)
        return params

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        codes = list(ALWAYS)
        if self._is_mutation():
            codes.extend(MUTATION)
        for code in sorted(codes):
            responses.setdefault(
                code,
                self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=ERRORS[code]), code
                ),
            )
        return responses


def document(**kwargs: Any) -> Callable[[F], F]:
    """``extend_schema`` for this API's views, based on :class:`HeadgateAutoSchema`.

    drf-spectacular bases a decorated method's schema on the project's
    ``DEFAULT_SCHEMA_CLASS`` unless the function names one itself; naming it here keeps
    the schema right without asking the project to change its DRF settings.
    """

    def decorator(func: F) -> F:
        func.schema = HeadgateAutoSchema  # type: ignore[attr-defined]
        return extend_schema(**kwargs)(func)  # type: ignore[no-any-return]

    return decorator


def only_headgate(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """Preprocessing hook: keep this API's endpoints, drop the project's others."""
    from headgate_django.api.base import HeadgateViewMixin

    return [
        endpoint
        for endpoint in endpoints
        if isinstance(getattr(endpoint[3], "cls", None), type)
        and issubclass(endpoint[3].cls, HeadgateViewMixin)
    ]


SPECTACULAR_SETTINGS: dict[str, Any] = {
    "TITLE": "headgate-django control API",
    "VERSION": __version__,
    "DESCRIPTION": "Jobs, queues, quarantine, DAG workflows and durable executions. "
    "Every route needs authentication; every mutation an `Idempotency-Key`. "
    'Errors: `{"error": {"code", "message", "detail"}}`. See docs/api.md.',
    "PREPROCESSING_HOOKS": ["headgate_django.api.schema.only_headgate"],
    # Tags come from the first path segment after ".../v1", wherever the API is mounted.
    "SCHEMA_PATH_PREFIX": r"^/(?:.*/)?v1",
    "SCHEMA_PATH_PREFIX_TRIM": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "headgate_django.models.STATE_CHOICES",
        "ExecutionStateEnum": "headgate_django.models.DURABLE_STATES",
    },
}

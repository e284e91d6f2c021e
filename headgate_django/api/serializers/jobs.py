"""Job shapes: the payload-free summary (lists), the detail, and the enqueue request."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from headgate_django.api.serializers.common import (
    INT32_MAX,
    MAX_DELAY_MS,
    AnyJSONField,
    Base64Field,
    InstantField,
    NameField,
    RequestSerializer,
    exactly_one,
    not_together,
)
from headgate_django.envelope import Envelope
from headgate_django.models import STATE_CHOICES, Job
from headgate_django.registry import get_task

#: Columns a list reads: never the payload, result, checkpoint or error log.
SUMMARY_FIELDS = [
    "id",
    "kind",
    "queue",
    "state",
    "priority",
    "schema_version",
    "attempt",
    "crash_attempt",
    "max_attempts",
    "fingerprint",
    "workflow_id",
    "unique_key",
    "claimed_by",
    "enqueued_at",
    "scheduled_at",
    "claimed_at",
    "finalized_at",
]


class JobSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = Job
        fields = SUMMARY_FIELDS
        read_only_fields = SUMMARY_FIELDS


class JobDetailSerializer(serializers.ModelSerializer):
    """Summary plus the attempt timeline; ``payload`` only when asked for and allowed."""

    timeout_s = serializers.SerializerMethodField()
    retention_s = serializers.SerializerMethodField()
    payload_size = serializers.SerializerMethodField()
    payload = serializers.SerializerMethodField()
    has_result = serializers.SerializerMethodField()
    errors = serializers.JSONField(read_only=True)

    class Meta:
        model = Job
        fields = [
            *SUMMARY_FIELDS,
            "fence",
            "lease_expires_at",
            "expires_at",
            "timeout_s",
            "retention_s",
            "errors",
            "has_result",
            "payload_size",
            "payload",
        ]
        read_only_fields = fields

    @extend_schema_field({"type": "number", "nullable": True})
    def get_timeout_s(self, job: Job) -> float | None:
        return None if job.timeout is None else job.timeout.total_seconds()

    @extend_schema_field({"type": "number"})
    def get_retention_s(self, job: Job) -> float:
        return job.retention.total_seconds()

    @extend_schema_field({"type": "integer"})
    def get_payload_size(self, job: Job) -> int:
        return len(bytes(job.payload))

    @extend_schema_field(
        {
            "type": "string",
            "format": "byte",
            "nullable": True,
            "description": "base64; null unless `include_payload=1` (needs view_job_payload).",
        }
    )
    def get_payload(self, job: Job) -> str | None:
        if not self.context.get("include_payload"):
            return None
        return Base64Field().to_representation(job.payload)

    @extend_schema_field({"type": "boolean"})
    def get_has_result(self, job: Job) -> bool:
        return job.state == "completed" and job.result is not None


#: ``pending: true`` together with a schedule.
_PENDING_AND_SCHEDULED = {
    "not": {
        "required": ["pending"],
        "properties": {"pending": {"enum": [True]}},
        "anyOf": [{"required": ["scheduled_at"]}, {"required": ["delay_ms"]}],
    }
}


class JobCreateSerializer(RequestSerializer):
    """Enqueue one job of a registered kind.

    Give the call as ``args``/``kwargs`` (encoded the way ``task.enqueue`` encodes them), or
    as a ready ``payload`` in base64 with its ``schema_version``. Unset options take the
    task's own defaults.
    """

    kind = NameField(max_length=128)
    args = serializers.ListField(child=AnyJSONField(), required=False)
    kwargs = serializers.DictField(child=AnyJSONField(), required=False)
    payload = Base64Field(required=False)
    schema_version = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)
    id = NameField(required=False)
    queue = NameField(max_length=128, required=False)
    priority = serializers.IntegerField(min_value=-INT32_MAX, max_value=INT32_MAX, required=False)
    max_attempts = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)
    scheduled_at = InstantField(required=False)
    delay_ms = serializers.IntegerField(min_value=0, max_value=MAX_DELAY_MS, required=False)
    pending = serializers.BooleanField(default=False)
    unique_key = NameField(required=False)

    schema_rules = {
        "allOf": [
            not_together("payload", "args", "kwargs"),
            not_together("scheduled_at", "delay_ms"),
            _PENDING_AND_SCHEDULED,
        ]
    }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "payload" in attrs and ("args" in attrs or "kwargs" in attrs):
            raise serializers.ValidationError("give either payload or args/kwargs, not both")
        timing = ["scheduled_at" in attrs, "delay_ms" in attrs, attrs["pending"]]
        if sum(timing) > 1:
            raise serializers.ValidationError(
                "give at most one of scheduled_at, delay_ms and pending: true"
            )
        return attrs

    def envelope(self) -> Envelope:
        data = self.validated_data
        definition = get_task(data["kind"])
        env = definition.envelope(*data.get("args", []), **data.get("kwargs", {}))
        changes: dict[str, Any] = {"pending": data["pending"]}
        for name in ("payload", "schema_version", "id", "queue", "priority", "max_attempts"):
            if name in data:
                changes[name] = data[name]
        if "scheduled_at" in data:
            changes["scheduled_at"] = data["scheduled_at"]
        if "delay_ms" in data:
            changes["delay"] = timedelta(milliseconds=data["delay_ms"])
        if "unique_key" in data:
            changes["unique_key"] = data["unique_key"]
        return replace(env, **changes)


class JobCreatedSerializer(serializers.Serializer):
    id = serializers.CharField()


class RescheduleSerializer(RequestSerializer):
    """Exactly one of ``scheduled_at`` (an instant) or ``delay_ms`` (from the store clock)."""

    schema_rules = exactly_one("scheduled_at", "delay_ms")
    body_required = True

    scheduled_at = InstantField(required=False)
    delay_ms = serializers.IntegerField(min_value=0, max_value=MAX_DELAY_MS, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("scheduled_at" in attrs) == ("delay_ms" in attrs):
            raise serializers.ValidationError("give exactly one of scheduled_at or delay_ms")
        return attrs


class ReplacePayloadSerializer(RequestSerializer):
    payload = Base64Field()
    schema_version = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)


class JobResultSerializer(serializers.Serializer):
    result = AnyJSONField(allow_null=True)


class JobProgressSerializer(serializers.Serializer):
    progress = AnyJSONField(allow_null=True)


class JobCheckpointSerializer(serializers.Serializer):
    checkpoint = serializers.DictField(child=AnyJSONField(), allow_null=True)
    cursor = Base64Field(allow_null=True, help_text="Position of the cursor step, base64.")


class JobCountsSerializer(serializers.Serializer):
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Every state, with 0 for empty ones."
    )
    total = serializers.IntegerField()
    approximate = serializers.BooleanField(
        help_text="True when any count is an estimate (see `estimated`)."
    )
    estimated = serializers.ListField(
        child=serializers.CharField(),
        help_text="States whose count is the database's estimate: a state with more than "
        "1,000 jobs is not counted row by row (PostgreSQL and MariaDB; SQLite counts exactly).",
    )


STATES = [value for value, _ in STATE_CHOICES]

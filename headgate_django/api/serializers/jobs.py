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
    SIMPLE_NAME,
    AnyJSONField,
    Base64Field,
    InstantField,
    KindField,
    NameField,
    QueueField,
    RequestSerializer,
    RouteIdField,
    exactly_one,
    needed_by,
    not_together,
)
from headgate_django.envelope import UNIQUE_REPLACE_FIELDS, Envelope
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.attempt_log import LEVELS
from headgate_django.kernel.names import (
    MAX_PARTITION_BYTES,
    MAX_RATE_CLASS_BYTES,
    validate_partition_key,
    validate_rate_class,
)
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
    "partition_key",
    "rate_class",
    "weight",
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
            "deadline",
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

    kind = KindField()
    args = serializers.ListField(child=AnyJSONField(), required=False)
    kwargs = serializers.DictField(child=AnyJSONField(), required=False)
    payload = Base64Field(required=False)
    schema_version = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)
    id = RouteIdField(required=False)
    queue = QueueField(required=False)
    priority = serializers.IntegerField(min_value=-INT32_MAX, max_value=INT32_MAX, required=False)
    max_attempts = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)
    scheduled_at = InstantField(required=False)
    delay_ms = serializers.IntegerField(min_value=0, max_value=MAX_DELAY_MS, required=False)
    pending = serializers.BooleanField(default=False)
    unique_key = NameField(required=False)
    partition_key = serializers.CharField(
        max_length=MAX_PARTITION_BYTES,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text=f"The job's tenant (fairness, per-partition ceilings); up to "
        f"{MAX_PARTITION_BYTES} bytes.",
    )
    rate_class = NameField(
        max_length=MAX_RATE_CLASS_BYTES,
        required=False,
        allow_null=True,
        validators=[SIMPLE_NAME],
        help_text="Letters, digits and _-.: (a letter, digit or _ first).",
    )
    weight = serializers.IntegerField(
        min_value=1, max_value=INT32_MAX, required=False, help_text="Cost against its rate class."
    )
    unique_window_ms = serializers.IntegerField(
        min_value=1,
        max_value=MAX_DELAY_MS,
        required=False,
        help_text="Throttle: hold unique_key this long from enqueue, whatever becomes of the job.",
    )
    unique_replace = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(UNIQUE_REPLACE_FIELDS)),
        required=False,
        min_length=1,
        help_text="Replace on conflict: a waiting holder of unique_key takes these values.",
    )
    unique_debounce_ms = serializers.IntegerField(
        min_value=1,
        max_value=MAX_DELAY_MS,
        required=False,
        help_text="Debounce: run this long after the last enqueue of unique_key.",
    )

    deadline = InstantField(
        required=False, help_text="Past this instant the job is archived (deadline_exceeded)."
    )
    deadline_ms = serializers.IntegerField(
        min_value=1,
        max_value=MAX_DELAY_MS,
        required=False,
        help_text="The deadline as a span from enqueue (store clock).",
    )

    schema_rules = {
        "allOf": [
            not_together("payload", "args", "kwargs"),
            not_together("scheduled_at", "delay_ms"),
            not_together("deadline", "deadline_ms"),
            not_together("unique_window_ms", "unique_replace", "unique_debounce_ms"),
            not_together("unique_replace", "unique_debounce_ms"),
            needed_by("unique_key", "unique_window_ms", "unique_replace", "unique_debounce_ms"),
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
        modes = [
            m for m in ("unique_window_ms", "unique_replace", "unique_debounce_ms") if m in attrs
        ]
        if "deadline" in attrs and "deadline_ms" in attrs:
            raise serializers.ValidationError("give at most one of deadline and deadline_ms")
        if len(modes) > 1:
            raise serializers.ValidationError(f"give at most one uniqueness mode, got {modes}")
        if modes and "unique_key" not in attrs:
            raise serializers.ValidationError({modes[0]: "a uniqueness mode needs a unique_key"})
        for name, check in (
            ("partition_key", validate_partition_key),
            ("rate_class", validate_rate_class),
        ):
            if attrs.get(name) is not None:
                try:
                    check(attrs[name])
                except DefinitionError as exc:
                    raise serializers.ValidationError({name: str(exc)}) from None
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
        for name in ("unique_key", "partition_key", "rate_class", "weight"):
            if name in data:
                changes[name] = data[name]
        for name in ("unique_window", "unique_debounce"):
            if f"{name}_ms" in data:
                changes[name] = timedelta(milliseconds=data[f"{name}_ms"])
        if "unique_replace" in data:
            changes["unique_replace"] = frozenset(data["unique_replace"])
        if "deadline" in data:
            changes["deadline"] = data["deadline"]
        elif "deadline_ms" in data:
            changes["deadline"] = timedelta(milliseconds=data["deadline_ms"])
        return replace(env, **changes)


class JobCreatedSerializer(serializers.Serializer):
    id = serializers.CharField()
    replaced = serializers.BooleanField(
        help_text="True (status 200) when a waiting holder of the unique key took the new "
        "values (unique_replace, unique_debounce); id is then the holder's."
    )


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


class JobOutputSerializer(serializers.Serializer):
    output = Base64Field(
        allow_null=True, help_text="The handler's latest ctx.set_output(), base64; null if unset."
    )
    updated_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was last set (store clock)."
    )


class JobEffectSerializer(serializers.Serializer):
    name = serializers.CharField()
    result = AnyJSONField(allow_null=True, help_text="What the effect's function returned.")
    fence = serializers.IntegerField(help_text="The fence of the attempt that ran it.")
    created_at = serializers.DateTimeField(help_text="When it committed (store clock).")


class JobEffectsSerializer(serializers.Serializer):
    effects = JobEffectSerializer(many=True)


class LogEntrySerializer(serializers.Serializer):
    level = serializers.ChoiceField(choices=list(LEVELS))
    at_ms = serializers.IntegerField(help_text="When the handler logged it (worker clock), ms.")
    message = serializers.CharField()
    fields = serializers.DictField(child=AnyJSONField(), help_text="The keyword fields.")
    truncated = serializers.BooleanField(help_text="Cut to 2 KiB or 32 fields.")


class AttemptLogSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(help_text="1 for the first attempt (crashes count).")
    outcome = serializers.ChoiceField(choices=["success", "error", "skip", "undecodable"])
    at = serializers.DateTimeField(help_text="When the outcome was written (store clock).")
    entries = LogEntrySerializer(many=True, help_text="Oldest first; the newest 100 kept.")
    dropped = serializers.IntegerField(help_text="Older entries not kept.")


class JobLogsSerializer(serializers.Serializer):
    attempts = AttemptLogSerializer(many=True, help_text="Oldest first; the newest 20 kept.")


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

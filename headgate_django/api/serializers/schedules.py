"""Schedule shapes: the schedule (its target named, never its payload), upsert, events."""

from __future__ import annotations

from rest_framework import serializers

from headgate_django.api.serializers.common import (
    AnyJSONField,
    NameField,
    RequestSerializer,
    exactly_one,
)
from headgate_django.models import ON_MISSED_CHOICES, SCHEDULE_OUTCOMES


class ScheduleSerializer(serializers.Serializer):
    name = serializers.CharField()
    spec = serializers.CharField()
    timezone = serializers.CharField()
    target_type = serializers.ChoiceField(choices=["task", "workflow", "durable"])
    target_name = serializers.CharField(help_text="Task kind, workflow factory or durable name.")
    on_missed = serializers.ChoiceField(choices=ON_MISSED_CHOICES)
    backfill_limit = serializers.IntegerField()
    paused = serializers.BooleanField()
    declared = serializers.BooleanField(help_text="Declared in HEADGATE['SCHEDULES'].")
    next_run_at = serializers.DateTimeField(allow_null=True)
    last_enqueued_at = serializers.DateTimeField(allow_null=True)
    plan_error = serializers.CharField(
        allow_null=True,
        help_text=(
            "Why its ticks cannot be computed (then next_run_at is null: the schedule is "
            "parked until it is edited or resumed); null when they can."
        ),
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ScheduleDetailSerializer(ScheduleSerializer):
    next_runs = serializers.ListField(child=serializers.DateTimeField(), help_text="Next 5.")


class ScheduleListSerializer(serializers.Serializer):
    schedules = ScheduleSerializer(many=True)
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as `cursor` for the next page; null on the last page."
    )


class DurableTargetSerializer(RequestSerializer):
    name = NameField(max_length=128)
    version = NameField(max_length=64)
    input = AnyJSONField(required=False, allow_null=True, default=None)
    task_queue = NameField(max_length=128, required=False, default="default")


class UpsertSerializer(RequestSerializer):
    """A schedule as ``HEADGATE['SCHEDULES']`` declares one: a spec and exactly one target
    (``task``, ``workflow`` or ``durable``; 422 otherwise, which ``schema_rules`` state)."""

    schema_rules = exactly_one("task", "workflow", "durable")

    spec = NameField()
    tz = NameField(max_length=64, required=False, allow_null=True, default=None)
    on_missed = serializers.ChoiceField(choices=ON_MISSED_CHOICES, default="skip")
    backfill_limit = serializers.IntegerField(default=10, min_value=0, max_value=10_000)
    paused = serializers.BooleanField(default=False)
    task = NameField(max_length=128, required=False, help_text="A registered task kind.")
    args = serializers.ListField(child=AnyJSONField(allow_null=True), required=False)
    kwargs = serializers.DictField(child=AnyJSONField(allow_null=True), required=False)
    workflow = NameField(max_length=128, required=False, help_text="A workflow factory.")
    durable = DurableTargetSerializer(required=False)


class RunSerializer(RequestSerializer):
    id = serializers.CharField(help_text="The job, workflow or execution id it started.")


class ScheduleEventSerializer(serializers.Serializer):
    tick_at = serializers.DateTimeField()
    outcome = serializers.ChoiceField(choices=SCHEDULE_OUTCOMES)
    reason = serializers.CharField(allow_blank=True)
    target_id = serializers.CharField(allow_blank=True)
    recorded_at = serializers.DateTimeField(allow_null=True)


class ScheduleEventListSerializer(serializers.Serializer):
    events = ScheduleEventSerializer(many=True)

"""Workflow shapes: summary, snapshot and node (payload-free), signals, grafts, retry."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from headgate_django.api.serializers.common import (
    INT32_MAX,
    AnyJSONField,
    Base64Field,
    KindField,
    NameField,
    QueueField,
    RedactingSerializer,
    RequestSerializer,
    not_together,
)

MAX_GRAFT_TASKS = 999


class WorkflowSummarySerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    coordinator_job_id = serializers.CharField()
    state = serializers.CharField(source="coordinator_state", help_text="The coordinator's state.")
    queue = serializers.CharField()
    enqueued_at = serializers.DateTimeField()
    finalized_at = serializers.DateTimeField(allow_null=True)


class WorkflowListSerializer(serializers.Serializer):
    workflows = WorkflowSummarySerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True, help_text="A workflow id, or null.")


class WorkflowNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    job_id = serializers.CharField()
    kind = serializers.ChoiceField(
        choices=["task", "signal", "timer", "condition", "child_workflow"]
    )
    job_kind = serializers.CharField()
    state = serializers.CharField(
        help_text="The job's state; `completed` when evidence is retained after the row "
        "expired; `missing` when the row is gone without evidence."
    )
    dependencies = serializers.ListField(child=serializers.CharField())
    dependents = serializers.ListField(child=serializers.CharField())
    completed_at_ms = serializers.IntegerField(allow_null=True)
    signal = serializers.CharField(allow_null=True)
    wake_at_ms = serializers.IntegerField(allow_null=True)
    delay_ms = serializers.IntegerField(allow_null=True)
    condition = serializers.CharField(allow_null=True)
    child_workflow_id = serializers.CharField(allow_null=True)


class WorkflowSnapshotSerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    coordinator_job_id = serializers.CharField()
    coordinator_state = serializers.CharField()
    revision = serializers.IntegerField()
    generation = serializers.IntegerField()
    failed = serializers.BooleanField()
    failed_subgraph_retry = serializers.BooleanField()
    retry_policy = serializers.DictField(child=serializers.IntegerField(), allow_null=True)
    nodes = WorkflowNodeSerializer(many=True)


class DependenciesSerializer(serializers.Serializer):
    dependencies = serializers.ListField(child=serializers.CharField())


class DependentsSerializer(serializers.Serializer):
    dependents = serializers.ListField(child=serializers.CharField())


class EventsSerializer(serializers.Serializer):
    events = serializers.ListField(
        child=serializers.DictField(child=AnyJSONField(allow_null=True)),
        help_text="The newest 256 history events, oldest first, each with a `sequence`.",
    )


class SignalRecordSerializer(RedactingSerializer):
    """An emission; ``payload`` and ``source`` are user data, null unless the caller may see it."""

    private_fields = ("payload", "source")

    id = serializers.IntegerField()
    workflow_id = serializers.CharField()
    signal = serializers.CharField()
    idempotency_key = serializers.CharField()
    payload = AnyJSONField(allow_null=True)
    source = AnyJSONField(allow_null=True)
    emitted_at = serializers.DateTimeField(help_text="Store clock.")


class SignalListSerializer(serializers.Serializer):
    signals = SignalRecordSerializer(many=True, help_text="Newest first.")
    next_cursor = serializers.IntegerField(
        allow_null=True, help_text="Pass as `cursor` for older emissions; null at the end."
    )


class SignalEmitSerializer(RequestSerializer):
    """The emission; its idempotency key is the request's ``Idempotency-Key``.

    ``source`` is caller-supplied metadata, not identity: fill it from your authenticated
    principal, not from end-user input.
    """

    signal = NameField(max_length=128)
    payload = AnyJSONField(required=False, allow_null=True, default=None)
    source = AnyJSONField(required=False, allow_null=True, default=None)


class SignalReceiptSerializer(serializers.Serializer):
    matched = serializers.IntegerField(help_text="Declared signal nodes with this name.")
    promoted = serializers.IntegerField(help_text="Waiting signal jobs this emission released.")
    inserted = serializers.BooleanField(
        help_text="False when the key replayed an earlier identical emission."
    )
    emission = SignalRecordSerializer()


class GraftTaskSerializer(RequestSerializer):
    name = NameField()
    deps = serializers.ListField(child=NameField(), required=False, default=list)
    kind = KindField()
    payload = Base64Field(required=False)
    args = serializers.ListField(child=AnyJSONField(), required=False)
    kwargs = serializers.DictField(child=AnyJSONField(), required=False)
    id = NameField(required=False)
    queue = QueueField(required=False)
    schema_version = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)

    schema_rules = not_together("payload", "args", "kwargs")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "payload" in attrs and ("args" in attrs or "kwargs" in attrs):
            raise serializers.ValidationError("give either payload or args/kwargs, not both")
        return attrs


class GraftSerializer(RequestSerializer):
    expected_revision = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    queue = QueueField(required=False)
    tasks = GraftTaskSerializer(many=True, min_length=1, max_length=MAX_GRAFT_TASKS)


class GraftReceiptSerializer(serializers.Serializer):
    receipt_id = serializers.CharField()
    revision = serializers.IntegerField(help_text="The revision the graft creates if accepted.")


class RecoverySerializer(RequestSerializer):
    node = NameField()
    payload = Base64Field(required=False, help_text="Replacement for an undecodable node.")
    schema_version = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)
    release_quarantine = serializers.BooleanField(default=False)


class RetrySerializer(RequestSerializer):
    expected_revision = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    recoveries = RecoverySerializer(many=True, required=False, default=list, max_length=999)


class RetryReceiptSerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    revision = serializers.IntegerField()
    generation = serializers.IntegerField()
    receipt_id = serializers.CharField(source="receipt_job_id")


class CancelSerializer(RequestSerializer):
    propagate_children = serializers.BooleanField(default=True)


class CancelResultSerializer(serializers.Serializer):
    jobs = serializers.IntegerField(help_text="Jobs cancelled.")
    workflows = serializers.IntegerField(help_text="Workflows visited.")

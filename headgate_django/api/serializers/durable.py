"""Durable execution shapes: the header (list without input/result), start, signal, verbs,
queries and updates."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from headgate_django.api.serializers.common import (
    AnyJSONField,
    DurableNameField,
    NameField,
    QueueField,
    RedactingSerializer,
    RequestSerializer,
    exactly_one,
)
from headgate_django.durable.manager import MAX_REASON_CHARS
from headgate_django.kernel.replay_events import PARENT_CLOSE_POLICIES
from headgate_django.models import DURABLE_STATES

DECISIONS = ["complete", "fail", "retry"]
UPDATE_STATES = ["accepted", "succeeded", "failed"]


class ExecutionSummarySerializer(serializers.Serializer):
    """An execution without its input and result (lists stay payload-free)."""

    id = serializers.CharField()
    name = serializers.CharField()
    version = serializers.CharField()
    state = serializers.ChoiceField(choices=DURABLE_STATES)
    failure_reason = serializers.CharField(allow_blank=True, allow_null=True)
    suspended_reason = serializers.CharField(allow_blank=True, allow_null=True)
    business_idempotency_key = serializers.CharField(allow_null=True)
    task_queue = serializers.CharField()
    parent_id = serializers.CharField(
        allow_null=True, help_text="The execution that started this one as a child, or null."
    )
    history_length = serializers.IntegerField(help_text="Events in the current run's history.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    run_id = serializers.CharField(help_text="The current run (continue-as-new starts another).")
    run_number = serializers.IntegerField()
    history_warning = serializers.CharField(
        allow_blank=True,
        help_text="Set once the current run's history passed the size thresholds.",
    )


class DurableRunSerializer(serializers.Serializer):
    """One run in the execution's chain; fetch its history with ``history?run_id=``."""

    number = serializers.IntegerField()
    run_id = serializers.CharField()
    events = serializers.IntegerField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True, help_text="Null for the current run.")
    current = serializers.BooleanField()


class ChildSerializer(serializers.Serializer):
    """A child execution this one started (``child:N`` names the start in its history)."""

    id = serializers.CharField()
    name = serializers.CharField()
    version = serializers.CharField()
    state = serializers.ChoiceField(choices=DURABLE_STATES)
    command_id = serializers.CharField()
    parent_close_policy = serializers.ChoiceField(choices=list(PARENT_CLOSE_POLICIES))


class ExecutionSerializer(RedactingSerializer, ExecutionSummarySerializer):
    """The header plus input, result and meta (user data, null unless the caller may see
    it), the children it started, oldest first, and ``runs``, the chain of runs, oldest
    first, the current one last."""

    private_fields = ("input", "result", "meta")

    runs = DurableRunSerializer(many=True)
    input = AnyJSONField(allow_null=True)
    result = AnyJSONField(allow_null=True)
    meta = serializers.DictField(child=AnyJSONField(), allow_null=True)
    children = ChildSerializer(many=True)


class ExecutionListSerializer(serializers.Serializer):
    executions = ExecutionSummarySerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True, help_text="An execution id, or null.")


class StartSerializer(RequestSerializer):
    name = DurableNameField(max_length=128)
    version = DurableNameField(max_length=64)
    input = AnyJSONField(required=False, allow_null=True, default=None)
    business_idempotency_key = DurableNameField(required=False, allow_null=True, default=None)
    workflow_id = DurableNameField(
        also_refused="/", max_length=200, required=False, allow_null=True, default=None
    )
    task_queue = QueueField(required=False, default="default")
    meta = serializers.DictField(child=AnyJSONField(allow_null=True), required=False)


class StartResultSerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    deduplicated = serializers.BooleanField(
        help_text="True: a live execution already held the business key; nothing started."
    )


class SignalWithStartSerializer(RequestSerializer):
    """Start ``name@version`` with ``input`` unless a live execution of ``name`` holds
    ``business_idempotency_key``, then deliver ``signal`` to it, in one transaction."""

    name = DurableNameField(max_length=128)
    version = DurableNameField(max_length=64)
    input = AnyJSONField(required=False, allow_null=True, default=None)
    business_idempotency_key = DurableNameField()
    task_queue = QueueField(required=False, default="default")
    meta = serializers.DictField(child=AnyJSONField(allow_null=True), required=False)
    signal = DurableNameField(max_length=128, help_text="The signal's name.")
    payload = AnyJSONField(required=False, allow_null=True, default=None)
    message_id = DurableNameField(
        required=False,
        help_text="Deduplicates deliveries of this signal name; defaults to the Idempotency-Key.",
    )


class SignalWithStartResultSerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    started = serializers.BooleanField(
        help_text="True: this request started the execution; false: a live one held the key."
    )
    delivered = serializers.BooleanField(
        help_text="False when this message_id was already delivered for this signal name."
    )


class DurableSignalSerializer(RequestSerializer):
    name = DurableNameField(max_length=128)
    payload = AnyJSONField(required=False, allow_null=True, default=None)
    message_id = DurableNameField(
        required=False,
        help_text="Deduplicates deliveries of this signal name; defaults to the Idempotency-Key.",
    )


class DeliveredSerializer(serializers.Serializer):
    delivered = serializers.BooleanField(
        help_text="False when this message_id was already delivered for this signal name."
    )


class ReasonSerializer(RequestSerializer):
    reason = serializers.CharField(required=False, max_length=MAX_REASON_CHARS)


class ResolveSerializer(RequestSerializer):
    """Decide an uncertain Operation, named by ``command_id`` (from the history's
    ``OperationUncertain`` event) or by its ``job_id``."""

    command_id = NameField(required=False)
    job_id = NameField(required=False)
    decision = serializers.ChoiceField(choices=DECISIONS)
    result = AnyJSONField(required=False, allow_null=True, default=None)
    error = serializers.CharField(required=False, allow_blank=True, default="", max_length=10000)

    schema_rules = exactly_one("command_id", "job_id")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("command_id" in attrs) == ("job_id" in attrs):
            raise serializers.ValidationError("give exactly one of command_id or job_id")
        return attrs


class HistoryDocumentSerializer(serializers.Serializer):
    """What ``durable.replay`` and ``manage.py durable_replay`` read."""

    workflow = serializers.DictField(
        child=AnyJSONField(allow_null=True),
        help_text="{name, version, id, input[, run_id]}: run_id when it is not the first run.",
    )
    events = serializers.ListField(
        child=serializers.DictField(child=AnyJSONField(allow_null=True)),
        help_text="[{seq, type, payload, at_ms}], oldest first.",
    )


class QueryResultSerializer(RedactingSerializer):
    """What a query returned: user data, null unless the caller may see it."""

    private_fields = ("result",)

    query = serializers.CharField()
    result = AnyJSONField(allow_null=True)


class UpdateRequestSerializer(RequestSerializer):
    payload = AnyJSONField(required=False, allow_null=True, default=None)
    update_id = DurableNameField(
        max_length=200,
        required=False,
        help_text="Makes the update exactly-once: a known id returns that update without "
        "running it again. Defaults to the Idempotency-Key.",
    )


class UpdateSerializer(RedactingSerializer):
    """One update; ``result`` is user data, null unless the caller may see it."""

    private_fields = ("result",)

    workflow_id = serializers.CharField()
    update_id = serializers.CharField()
    name = serializers.CharField()
    state = serializers.ChoiceField(
        choices=UPDATE_STATES,
        help_text="accepted: recorded, not handled yet; succeeded: `result` is the handler's "
        "value; failed: `error` says why (the handler raised, or the workflow ended first).",
    )
    result = AnyJSONField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    deduplicated = serializers.BooleanField(
        help_text="True when the update id was already known: nothing new was recorded."
    )

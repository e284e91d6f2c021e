"""Bodies of ``POST /api/v1/jobs/actions``: an action over a filter, with the count the
operator confirmed (see :mod:`headgate_django.bulk`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from rest_framework import serializers

from headgate_django.api.serializers.common import (
    MAX_DELAY_MS,
    InstantField,
    KindField,
    NameField,
    RequestSerializer,
    not_together,
)
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.states import State
from headgate_django.store.bulk import ACTIONS

#: Ids one request may list (the reference's bound on ``/jobs/actions``).
MAX_IDS = 1000
_STATES = [s.value for s in State if s is not State.DELETED]


class BulkFilterSerializer(RequestSerializer):
    """Every given criterion must hold; at least one is needed."""

    schema_rules: ClassVar[dict[str, Any]] = {"minProperties": 1}

    queue = NameField(required=False, max_length=128)
    kind = KindField(required=False)
    states = serializers.ListField(
        child=serializers.ChoiceField(choices=_STATES), required=False, max_length=len(_STATES)
    )
    enqueued_after = InstantField(required=False)
    enqueued_before = InstantField(required=False)
    finalized_after = InstantField(required=False)
    finalized_before = InstantField(required=False)
    ids = serializers.ListField(child=NameField(), required=False, min_length=1, max_length=MAX_IDS)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("give at least one filter (or ids)")
        return attrs


class BulkActionSerializer(RequestSerializer):
    """``scheduled_at`` or ``delay_ms`` only with ``reschedule``, which needs one of them."""

    # Stated with ``not`` (as the enqueue body's rules are): a ``oneOf`` over the action
    # would say the same, but ReDoc then renders nothing.
    schema_rules = {
        "allOf": [
            not_together("scheduled_at", "delay_ms"),
            # reschedule without an instant
            {
                "not": {
                    "required": ["action"],
                    "properties": {"action": {"enum": ["reschedule"]}},
                    "not": {"anyOf": [{"required": ["scheduled_at"]}, {"required": ["delay_ms"]}]},
                }
            },
            # an instant with another action
            {
                "not": {
                    "required": ["action"],
                    "properties": {"action": {"not": {"enum": ["reschedule"]}}},
                    "anyOf": [{"required": ["scheduled_at"]}, {"required": ["delay_ms"]}],
                }
            },
        ]
    }

    action = serializers.ChoiceField(choices=list(ACTIONS))
    filter = BulkFilterSerializer()
    expected_count = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        help_text="How many jobs the operator expects the filter to match (409 otherwise).",
    )
    scheduled_at = InstantField(required=False)
    delay_ms = serializers.IntegerField(min_value=0, max_value=MAX_DELAY_MS, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The action and its instant must go together: a body of the right shape whose
        combination cannot be carried out is a 422 (``schema_rules`` state the rule)."""
        timed = "scheduled_at" in attrs or "delay_ms" in attrs
        if attrs["action"] == "reschedule" and ("scheduled_at" in attrs) == ("delay_ms" in attrs):
            raise DefinitionError("reschedule needs exactly one of scheduled_at or delay_ms")
        if attrs["action"] != "reschedule" and timed:
            raise DefinitionError(f"{attrs['action']} takes no scheduled_at or delay_ms")
        return attrs

    def call_kwargs(self) -> dict[str, Any]:
        """:func:`headgate_django.bulk.perform`'s keyword arguments."""
        data = dict(self.validated_data)
        kwargs: dict[str, Any] = {"expected_count": data["expected_count"], **data["filter"]}
        if "scheduled_at" in data:
            kwargs["at"] = data["scheduled_at"]
        if "delay_ms" in data:
            kwargs["delay"] = timedelta(milliseconds=data["delay_ms"])
        return kwargs


class BulkResultSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=list(ACTIONS))
    matched = serializers.IntegerField(help_text="Jobs the filter matched (= expected_count).")
    changed = serializers.IntegerField(
        allow_null=True, help_text="Jobs the action moved; null when it runs as a job (202)."
    )
    job_id = serializers.CharField(
        allow_null=True,
        help_text="The internal job doing it (202): follow its progress on /jobs/{id}/progress.",
    )

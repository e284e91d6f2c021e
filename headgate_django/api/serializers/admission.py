"""Admission shapes: a job's verdict, and the policies with their request bodies."""

from __future__ import annotations

from rest_framework import serializers

from headgate_django.api.serializers.common import INT32_MAX, AnyJSONField, RequestSerializer
from headgate_django.kernel.admission import MAX_WINDOW_MS, ON_SATURATED
from headgate_django.kernel.fairness import DEFAULT_CREDIT_CAP, DEFAULT_QUANTUM, MAX_QUANTUM


class AdmissionSerializer(serializers.Serializer):
    admissible = serializers.BooleanField()
    blocked_by = serializers.ChoiceField(
        choices=[
            "rate_class",
            "concurrency_limit",
            "fairness",
            "quarantine",
            "schedule",
            "queue_paused",
        ],
        allow_null=True,
    )
    detail = serializers.DictField(child=AnyJSONField())
    estimated_admission_ms = serializers.IntegerField(allow_null=True)


class RateClassSerializer(serializers.Serializer):
    name = serializers.CharField()
    limit = serializers.IntegerField()
    window_ms = serializers.IntegerField()
    burst = serializers.IntegerField()
    paused = serializers.BooleanField()
    tokens = serializers.FloatField(help_text="Tokens now (refilled on the store clock).")


class RateClassListSerializer(serializers.Serializer):
    rate_classes = RateClassSerializer(many=True)


class RateClassRequestSerializer(RequestSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    window_ms = serializers.IntegerField(min_value=1, max_value=MAX_WINDOW_MS)
    burst = serializers.IntegerField(min_value=1, max_value=INT32_MAX, required=False)
    paused = serializers.BooleanField(default=False)


class ConcurrencyLimitSerializer(serializers.Serializer):
    queue = serializers.CharField()
    max_concurrent = serializers.IntegerField()
    on_saturated = serializers.ChoiceField(choices=list(ON_SATURATED))


class ConcurrencyLimitListSerializer(serializers.Serializer):
    concurrency_limits = ConcurrencyLimitSerializer(many=True)


class ConcurrencyLimitRequestSerializer(RequestSerializer):
    max_concurrent = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    on_saturated = serializers.ChoiceField(choices=list(ON_SATURATED), default="queue")


class BackpressureSerializer(serializers.Serializer):
    queue = serializers.CharField()
    max_unfinished = serializers.IntegerField()
    current = serializers.IntegerField(help_text="Unfinished jobs now (counted to limit + 1).")


class BackpressureListSerializer(serializers.Serializer):
    backpressure = BackpressureSerializer(many=True)


class BackpressureRequestSerializer(RequestSerializer):
    max_unfinished = serializers.IntegerField(
        min_value=0, max_value=INT32_MAX, help_text="0 closes the queue's intake."
    )


class QueueWeightSerializer(serializers.Serializer):
    queue = serializers.CharField()
    weight = serializers.IntegerField()
    dispatched = serializers.IntegerField(help_text="Jobs claimed while weights applied.")
    available = serializers.IntegerField(help_text="Waiting jobs now (counted to 10,001).")


class QueueWeightListSerializer(serializers.Serializer):
    queue_weights = QueueWeightSerializer(many=True)


class QueueWeightRequestSerializer(RequestSerializer):
    weight = serializers.IntegerField(min_value=1, max_value=INT32_MAX)


class FairnessSerializer(serializers.Serializer):
    queue = serializers.CharField()
    quantum = serializers.IntegerField()
    credit_cap = serializers.IntegerField()
    turn = serializers.CharField(allow_null=True, help_text="The partition in its turn.")
    credit = serializers.IntegerField(help_text="What that turn has left (0: it is over).")


class FairnessListSerializer(serializers.Serializer):
    fairness = FairnessSerializer(many=True)


class FairnessRequestSerializer(RequestSerializer):
    quantum = serializers.IntegerField(min_value=1, max_value=MAX_QUANTUM, default=DEFAULT_QUANTUM)
    credit_cap = serializers.IntegerField(
        min_value=0, max_value=MAX_QUANTUM, default=DEFAULT_CREDIT_CAP
    )

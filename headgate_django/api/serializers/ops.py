"""Operations shapes: queues, quarantine, health and meta."""

from __future__ import annotations

from rest_framework import serializers

from headgate_django.models import Quarantine


class QueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Jobs by state.")
    total = serializers.IntegerField()
    oldest_available_age_s = serializers.FloatField(
        allow_null=True, help_text="Age of the oldest available job (store clock), or null."
    )
    arrivals_last_minute = serializers.IntegerField()
    completions_last_minute = serializers.IntegerField()
    paused = serializers.BooleanField()
    estimated = serializers.ListField(
        child=serializers.CharField(),
        help_text="States whose count is the database's estimate (more than 1,000 jobs).",
    )


class EvictionSerializer(serializers.Serializer):
    backlog = serializers.IntegerField(help_text="Jobs past their retention not yet evicted.")
    backlog_estimated = serializers.BooleanField(help_text="True above 1,000: an estimate.")
    rows_per_second = serializers.FloatField(
        allow_null=True, help_text="Delete rate of the last eviction pass, or null."
    )
    last_run_at = serializers.DateTimeField(allow_null=True)


class QueueListSerializer(serializers.Serializer):
    queues = QueueSerializer(many=True)
    eviction = EvictionSerializer()
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as `cursor` for the next page; null on the last page."
    )


class QuarantineSerializer(serializers.ModelSerializer):
    """A quarantined fingerprint; the sample payload is never exposed here."""

    class Meta:
        model = Quarantine
        fields = ["fingerprint", "kind", "crash_count", "quarantined_at", "sample_job_id", "reason"]
        read_only_fields = fields


class StatusSerializer(serializers.Serializer):
    status = serializers.CharField()


class MetaSerializer(serializers.Serializer):
    version = serializers.CharField()
    database = serializers.CharField(help_text="Django's vendor: postgresql, mysql or sqlite.")
    capabilities = serializers.ListField(
        child=serializers.CharField(),
        help_text="Subset of transactional, skip_locked, notifying, inspect, aggregation, "
        "workflows, durable.",
    )
    limits = serializers.DictField(child=serializers.IntegerField())
    read_only = serializers.BooleanField()

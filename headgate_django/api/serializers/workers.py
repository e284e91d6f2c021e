"""Worker registry shapes: a worker as its last heartbeat described it, and its status."""

from __future__ import annotations

from rest_framework import serializers

from headgate_django.kernel.workers import STATUSES


class WorkerSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The worker id (host:pid:suffix unless given).")
    status = serializers.ChoiceField(
        choices=STATUSES,
        help_text="live; gone: missed 3 heartbeats without a clean stop; stopped: a clean stop.",
    )
    host = serializers.CharField()
    pid = serializers.IntegerField()
    queues = serializers.ListField(
        child=serializers.CharField(), allow_null=True, help_text="null: every queue."
    )
    concurrency = serializers.IntegerField()
    in_flight = serializers.IntegerField(help_text="Jobs held at the last heartbeat.")
    in_flight_by_queue = serializers.DictField(child=serializers.IntegerField())
    claimed = serializers.IntegerField(help_text="Since the worker started.")
    completed = serializers.IntegerField()
    retried = serializers.IntegerField()
    failed = serializers.IntegerField()
    heartbeat_s = serializers.FloatField(help_text="The interval it beats at.")
    heartbeat_age_s = serializers.FloatField(help_text="Seconds since its last heartbeat.")
    started_at = serializers.DateTimeField()
    last_heartbeat_at = serializers.DateTimeField()
    stopped_at = serializers.DateTimeField(allow_null=True)


class WorkerListSerializer(serializers.Serializer):
    workers = WorkerSerializer(many=True)
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Pass as `cursor` for the next page; null on the last page."
    )

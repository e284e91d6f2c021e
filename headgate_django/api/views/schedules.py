"""``/schedules``: periodic schedules, read, upserted, paused, run now, and their events.

A thin translation of :mod:`headgate_django.schedules`. A body is what one entry of
``HEADGATE["SCHEDULES"]`` holds, and is checked by the same code, except that its task is
named by kind, never by import path. ``run`` is a mutation like any other, so a retried
request with the same ``Idempotency-Key`` replays the first response instead of starting
the target twice.
"""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django import schedules
from headgate_django.api import query
from headgate_django.api.base import ID_REGEX, HeadgateViewSet
from headgate_django.api.pagination import limit_param
from headgate_django.api.schema import document
from headgate_django.api.serializers import schedules as s
from headgate_django.models import Schedule
from headgate_django.schedules import delete as delete_schedule
from headgate_django.schedules.declared import options
from headgate_django.schedules.targets import target_label
from headgate_django.store.schedules import EVENTS_KEPT


def _body(view: schedules.ScheduleView, *, detail: bool = False) -> dict[str, Any]:
    target_type, target_name = target_label(view.target)
    body = {key: getattr(view, key) for key in s.ScheduleSerializer().fields if hasattr(view, key)}
    body.update(target_type=target_type, target_name=target_name)
    if detail:
        body["next_runs"] = schedules.next_runs(view.name)
        return dict(s.ScheduleDetailSerializer(body).data)
    return dict(s.ScheduleSerializer(body).data)


EVENTS_LIMIT = limit_param(100, EVENTS_KEPT)
CURSOR = query.text("cursor", "`next_cursor` of the previous page (a schedule name).")
LIMIT = limit_param(50)


class ScheduleViewSet(HeadgateViewSet):
    """Periodic schedules; targets are named, their payloads never shown."""

    permission_model = Schedule
    lookup_field = "name"
    lookup_value_regex = ID_REGEX

    @document(
        summary="Schedules by name",
        parameters=[CURSOR.openapi(), LIMIT.openapi()],
        responses=s.ScheduleListSerializer,
    )
    def list(self, request: Request) -> Response:
        limit = int(LIMIT.read(request, 50))
        rows = schedules.list_schedules(after=CURSOR.read(request), limit=limit + 1)
        page = rows[:limit]
        next_cursor = page[-1].name if len(rows) > limit else None
        return Response({"schedules": [_body(v) for v in page], "next_cursor": next_cursor})

    @document(summary="One schedule and its next five ticks", responses=s.ScheduleDetailSerializer)
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(_body(schedules.get(name), detail=True))

    @document(
        summary="Create or replace a schedule (the same spec keeps its phase)",
        request=s.UpsertSerializer,
        responses=s.ScheduleDetailSerializer,
    )
    def update(self, request: Request, name: str) -> Response:
        serializer = s.UpsertSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        entry = {k: v for k, v in serializer.validated_data.items() if v is not None}
        kw = options(name, entry, import_paths=False)
        view = schedules.upsert(name, kw.pop("spec"), kw.pop("target"), **kw)
        return Response(_body(view, detail=True))

    @document(summary="Delete a schedule (its events stay)", responses={204: None})
    def destroy(self, request: Request, name: str) -> Response:
        delete_schedule(name)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @document(summary="Pause a schedule", request=None, responses=s.ScheduleDetailSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        return Response(_body(schedules.pause(name), detail=True))

    @document(
        summary="Resume a schedule from the first tick after now",
        request=None,
        responses=s.ScheduleDetailSerializer,
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        return Response(_body(schedules.resume(name), detail=True))

    @document(
        summary="Start the target once now (next_run_at does not move)",
        request=None,
        responses={201: s.RunSerializer},
    )
    @action(detail=True, methods=["post"])
    def run(self, request: Request, name: str) -> Response:
        return Response({"id": schedules.run_now(name)}, status=status.HTTP_201_CREATED)

    @document(
        summary="The schedule's newest events (kept after it is deleted)",
        parameters=[EVENTS_LIMIT.openapi()],
        responses=s.ScheduleEventListSerializer,
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, name: str) -> Response:
        events = schedules.events(name, limit=int(EVENTS_LIMIT.read(request, 100)))
        return Response({"events": s.ScheduleEventSerializer(events, many=True).data})

"""``/queues`` and ``/quarantine``: the operations dashboard's reads and switches."""

from __future__ import annotations

from dataclasses import asdict

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django import store
from headgate_django.api import query
from headgate_django.api.base import ID_REGEX, HeadgateGenericViewSet, HeadgateViewSet
from headgate_django.api.errors import UnknownQueue
from headgate_django.api.filters import QuarantineFilter, StrictFilterBackend, openapi_parameters
from headgate_django.api.pagination import MAX_LIMIT, cursor_pagination, limit_param
from headgate_django.api.schema import document
from headgate_django.api.serializers.ops import QuarantineSerializer, QueueListSerializer
from headgate_django.kernel.names import MAX_QUEUE_BYTES, validate_queue
from headgate_django.models import Quarantine, QueueState
from headgate_django.registry import registered_queues
from headgate_django.store.stats import eviction_status, queue_is_known, queue_overview_page

RELEASED = OpenApiResponse(
    description="Released; `X-Released-Jobs` says how many quarantined jobs became available."
)

RELEASED_HEADER = OpenApiParameter(
    "X-Released-Jobs",
    int,
    OpenApiParameter.HEADER,
    response=[204],
    description="How many quarantined jobs became available.",
)


CREATE = query.flag(
    "create",
    "Pause a queue nothing uses yet (no job, no registered task, no earlier switch) — "
    "pre-pausing before its producers are deployed. Without it such a queue is a 404.",
)
#: The queue-name grammar of :func:`headgate_django.kernel.names.validate_queue`.
QUEUE_NAME = OpenApiParameter(
    "name",
    {"type": "string", "pattern": f"^[A-Za-z0-9_][A-Za-z0-9_.:-]{{0,{MAX_QUEUE_BYTES - 1}}}$"},
    OpenApiParameter.PATH,
    description="Queue name.",
)


#: Queues by name: a page's ``next_cursor`` is ``queues:<the page's last name>``.
QUEUE_PAGES = cursor_pagination("queues", ("name",), page_size=MAX_LIMIT)()
QUEUE_CURSOR = QUEUE_PAGES.cursor_param()
QUEUE_LIMIT = limit_param(MAX_LIMIT)


def _known_queue(name: str, *, create: bool = False) -> str:
    """The validated name of a queue something uses; 404 ``unknown_queue`` otherwise, so a
    typo cannot silently switch a queue that nothing will ever read."""
    validate_queue(name)
    if not (create or name in registered_queues() or queue_is_known(name)):
        raise UnknownQueue(f"no job, task or switch uses queue {name!r}", queue=name)
    return name


class QueueViewSet(HeadgateViewSet):
    """Queues exist while they have jobs or a switch; pausing makes every claim skip one."""

    permission_model = QueueState
    lookup_field = "name"
    lookup_value_regex = ID_REGEX

    @document(
        summary="Queues with counts by state, oldest available age, last-minute rates",
        parameters=[QUEUE_CURSOR.openapi(), QUEUE_LIMIT.openapi()],
        responses=QueueListSerializer,
    )
    def list(self, request: Request) -> Response:
        """Queues by name, ``limit`` (at most 200) a page: a queue costs the read a query
        or two of its own, so a store with thousands of queue names is read a page at a
        time. ``next_cursor`` is null on the last page."""
        cursor = QUEUE_CURSOR.read(request)
        limit = QUEUE_LIMIT.read(request, MAX_LIMIT)
        page = queue_overview_page(
            after=cursor.position if cursor is not None else None,
            limit=limit,
            known_queues=registered_queues(),
        )
        queues = [{**asdict(q), "total": q.total} for q in page.queues]
        last = page.queues[-1].name if page.more and page.queues else None
        return Response(
            {
                "queues": queues,
                "eviction": asdict(eviction_status()),
                "next_cursor": None if last is None else f"queues:{last}",
            }
        )

    @document(
        summary="Pause a queue: claims skip it",
        parameters=[QUEUE_NAME, CREATE.openapi()],
        request=None,
        responses={204: None},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        """A queue no job, registered task or earlier switch uses is a 404
        ``unknown_queue`` unless ``?create=true`` asks to pre-pause it."""
        store.queue_set_paused(_known_queue(name, create=CREATE.read(request, False)), True)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @document(
        summary="Resume a paused queue",
        parameters=[QUEUE_NAME],
        request=None,
        responses={204: None},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        """A queue nothing uses is a 404 ``unknown_queue``: it has nothing to resume."""
        store.queue_set_paused(_known_queue(name), False)
        return Response(status=status.HTTP_204_NO_CONTENT)


class QuarantineViewSet(HeadgateGenericViewSet):
    """Fingerprints quarantined after repeated crashes; sample payloads are never shown."""

    permission_model = Quarantine
    serializer_class = QuarantineSerializer
    lookup_field = "fingerprint"
    lookup_value_regex = ID_REGEX
    filter_backends = [StrictFilterBackend]
    filterset_class = QuarantineFilter
    pagination_class = cursor_pagination("quarantine", ("fingerprint",))

    def get_queryset(self) -> QuerySet[Quarantine]:
        return Quarantine.objects.defer("sample_payload")

    @document(
        summary="Quarantined fingerprints (no sample payloads)",
        parameters=openapi_parameters(QuarantineFilter),
        responses=QuarantineSerializer,
    )
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(QuarantineSerializer(page, many=True).data)

    @document(
        summary="Release a fingerprint",
        responses={204: RELEASED},
        parameters=[RELEASED_HEADER],
    )
    def destroy(self, request: Request, fingerprint: str) -> Response:
        released = store.quarantine_release(fingerprint)
        return Response(
            status=status.HTTP_204_NO_CONTENT, headers={"X-Released-Jobs": str(released)}
        )

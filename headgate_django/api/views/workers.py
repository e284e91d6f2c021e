"""``/workers``: the worker registry, read-only.

Every ``runworkers`` process upserts its row on its heartbeat; a worker that stopped
heartbeating without a clean stop is listed as ``gone`` until the retention drops it
(:mod:`headgate_django.kernel.workers`). The registry holds a fleet's worth of rows, so the
status filter is applied to the rows read in id order after the cursor, at most
:data:`MAX_WORKERS` of them per page: a filtered page can be short, or empty, and still
have a ``next_cursor``.
"""

from __future__ import annotations

from dataclasses import asdict

from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api import query
from headgate_django.api.base import ID_REGEX, HeadgateViewSet
from headgate_django.api.pagination import limit_param
from headgate_django.api.schema import document
from headgate_django.api.serializers.workers import WorkerListSerializer, WorkerSerializer
from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.workers import STATUSES
from headgate_django.models import Worker
from headgate_django.store.workers import MAX_WORKERS, worker_get, worker_list

STATUS = query.choice("status", STATUSES, "Only workers with this status.")
CURSOR = query.text("cursor", "`next_cursor` of the previous page (a worker id).")
LIMIT = limit_param(100)


class WorkerViewSet(HeadgateViewSet):
    """Registered worker processes with their heartbeat, counters and jobs in flight."""

    permission_model = Worker
    lookup_field = "worker_id"
    lookup_value_regex = ID_REGEX

    @document(
        summary="Workers by id: live, gone (missed heartbeats) and stopped",
        parameters=[p.openapi() for p in (STATUS, CURSOR, LIMIT)],
        responses=WorkerListSerializer,
    )
    def list(self, request: Request) -> Response:
        status = STATUS.read(request)
        limit = int(LIMIT.read(request, 100))
        read = worker_list(after=CURSOR.read(request), limit=MAX_WORKERS)
        rows = read if status is None else [w for w in read if w.status == status]
        page = rows[:limit]
        if len(rows) > limit:
            next_cursor: str | None = page[-1].id
        elif len(read) >= MAX_WORKERS:
            # The registry goes on past the rows one read takes: the next page starts
            # where this read stopped, though the filter left this page short.
            next_cursor = read[-1].id
        else:
            next_cursor = None
        body = {
            "workers": WorkerSerializer([asdict(w) for w in page], many=True).data,
            "next_cursor": next_cursor,
        }
        return Response(body)

    @document(summary="One worker", responses=WorkerSerializer)
    def retrieve(self, request: Request, worker_id: str) -> Response:
        view = worker_get(worker_id)
        if view is None:
            raise NotFoundError(f"no worker {worker_id!r} is registered")
        return Response(WorkerSerializer(asdict(view)).data)

"""``/durable/executions``: start, list, read, history, signal (or signal-with-start),
query, update and operate executions.

A thin translation of :class:`headgate_django.durable.Client` and ``Manager``. The history
route returns the export byte for byte as ``Manager.history`` writes it, so
``curl …/history > h.json`` feeds ``durable.replay`` / ``manage.py durable_replay``
directly. Input, result, meta and the history are user data
(:mod:`headgate_django.visibility`): the history needs ``headgate_django.view_job_payload``
(403 otherwise), and an execution's input, result and meta are null with ``redacted: true``
without it. A signal's ``message_id`` defaults to the request's ``Idempotency-Key``, so a
retried request can never deliver a signal twice, even after the response record expired
(``signal-with-start`` does the same); an update's ``update_id`` defaults to it the same
way. A query's or an update's result is user data too, redacted like an execution's
result. Queries and update validators run the workflow's code in this process: the
project's web process must import its workflows.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api import query
from headgate_django.api.base import ID_REGEX, HeadgateViewSet
from headgate_django.api.idempotency import require_key
from headgate_django.api.pagination import limit_param
from headgate_django.api.permissions import require_payload_permission
from headgate_django.api.schema import ErrorSerializer, document
from headgate_django.api.serializers import durable as s
from headgate_django.durable import Client, Manager
from headgate_django.exceptions import NotFoundError
from headgate_django.models import DURABLE_STATES, Execution
from headgate_django.store.durable_runs import is_operation_of

FILTERS = [
    query.choice("state", DURABLE_STATES, "The execution's state."),
    query.text("name", "Workflow name."),
    query.text("version", "Workflow version."),
    query.text("task_queue", "The queue its replay jobs use."),
    query.text("business_idempotency_key", "The business key it was started with."),
]
CURSOR = query.text("cursor", "`next_cursor` of the previous page (an execution id).")
RUN = query.text("run_id", "A run of the execution (from `runs`); default: the current run.")
LIMIT = limit_param(50)
ARGS = query.json_or_text(
    "arg",
    "The query's arguments in order, one `arg` each: read as JSON when it parses as JSON "
    '(`3`, `"3"`, `[1, 2]`), otherwise as text (`tea`).',
)
QUERY_NAME = OpenApiParameter("query_name", str, OpenApiParameter.PATH, description="Query name.")
UPDATE_NAME = OpenApiParameter(
    "update_name", str, OpenApiParameter.PATH, description="Update name."
)
UPDATE_ID = OpenApiParameter("update_id", str, OpenApiParameter.PATH, description="Update id.")
UPDATE_PATH = rf"updates/(?P<update_name>{ID_REGEX})"
#: A query runs code: besides the errors of every read, it may answer these.
QUERY_ERRORS = {
    409: OpenApiResponse(
        ErrorSerializer,
        description="`nondeterminism`: the workflow code no longer replays the history.",
    ),
    413: OpenApiResponse(
        ErrorSerializer,
        description="`payload_too_large` / `result_too_large`: the arguments or the result "
        "are over their limit.",
    ),
    422: OpenApiResponse(
        ErrorSerializer,
        description="`query_failed` (the handler raised or tried to issue a command), "
        "`invalid_payload`, or `invalid_definition` (the workflow is not registered in "
        "the web process).",
    ),
}


def _view(request: Request, workflow_id: str) -> Response:
    view = Manager().get(workflow_id)
    return Response(s.ExecutionSerializer(view, context={"request": request}).data)


class ExecutionViewSet(HeadgateViewSet):
    """Durable (workflow-as-code) executions; lists carry no input or result."""

    permission_model = Execution
    lookup_field = "workflow_id"
    lookup_value_regex = ID_REGEX

    @document(
        summary="Executions ordered by id (without input and result)",
        parameters=[p.openapi() for p in (*FILTERS, CURSOR, LIMIT)],
        responses=s.ExecutionListSerializer,
    )
    def list(self, request: Request) -> Response:
        filters = {p.name: v for p in FILTERS if (v := p.read(request)) is not None}
        page = Manager().list(filters, CURSOR.read(request), LIMIT.read(request, 50))
        body = {
            "executions": s.ExecutionSummarySerializer(page.items, many=True).data,
            "next_cursor": page.cursor,
        }
        return Response(body)

    @document(
        summary="Start an execution (deduplicated by a live business key)",
        request=s.StartSerializer,
        responses={201: s.StartResultSerializer, 200: s.StartResultSerializer},
    )
    def create(self, request: Request) -> Response:
        serializer = s.StartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        started = Client().start(
            data["name"],
            data["version"],
            data["input"],
            business_idempotency_key=data["business_idempotency_key"],
            workflow_id=data["workflow_id"],
            task_queue=data["task_queue"],
            meta=data.get("meta"),
        )
        code = status.HTTP_200_OK if started.deduplicated else status.HTTP_201_CREATED
        body = {"workflow_id": started.workflow_id, "deduplicated": started.deduplicated}
        return Response(body, status=code)

    @document(
        summary="Start unless a live execution holds the business key, then signal it",
        request=s.SignalWithStartSerializer,
        responses={201: s.SignalWithStartResultSerializer, 200: s.SignalWithStartResultSerializer},
    )
    @action(detail=False, methods=["post"], url_path="signal-with-start")
    def signal_with_start(self, request: Request) -> Response:
        serializer = s.SignalWithStartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = Client().signal_with_start(
            data["name"],
            data["version"],
            data["input"],
            data["signal"],
            data["payload"],
            business_idempotency_key=data["business_idempotency_key"],
            message_id=data.get("message_id") or require_key(request),
            task_queue=data["task_queue"],
            meta=data.get("meta"),
        )
        code = status.HTTP_201_CREATED if result.started else status.HTTP_200_OK
        body = {
            "workflow_id": result.workflow_id,
            "started": result.started,
            "delivered": result.delivered,
        }
        return Response(body, status=code)

    @document(
        summary="One execution; input, result and meta need view_job_payload",
        responses=s.ExecutionSerializer,
    )
    def retrieve(self, request: Request, workflow_id: str) -> Response:
        return _view(request, workflow_id)

    @document(
        summary="History of a run in the replay-checker format (needs view_job_payload)",
        parameters=[RUN.openapi()],
        responses=s.HistoryDocumentSerializer,
    )
    @action(detail=True, methods=["get"])
    def history(self, request: Request, workflow_id: str) -> HttpResponse:
        require_payload_permission(request)
        document = Manager().history(workflow_id, RUN.read(request))
        return HttpResponse(document.encode(), content_type="application/json")

    @document(
        summary="Deliver a signal",
        request=s.DurableSignalSerializer,
        responses=s.DeliveredSerializer,
    )
    @action(detail=True, methods=["post"])
    def signal(self, request: Request, workflow_id: str) -> Response:
        serializer = s.DurableSignalSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        message_id = data.get("message_id") or require_key(request)
        delivered = Client().signal(workflow_id, data["name"], data["payload"], message_id)
        return Response({"delivered": delivered})

    @document(
        summary="Ask a query: the workflow's state as of its last committed event",
        parameters=[QUERY_NAME, ARGS.openapi()],
        responses={200: s.QueryResultSerializer, **QUERY_ERRORS},
    )
    # Not named ``query``/``update``: a view method named like an HTTP method (``QUERY``)
    # or a DRF route would be taken for one.
    @action(
        detail=True,
        methods=["get"],
        url_path=rf"queries/(?P<query_name>{ID_REGEX})",
        url_name="query",
    )
    def ask_query(self, request: Request, workflow_id: str, query_name: str) -> Response:
        result = Manager().query(workflow_id, query_name, *ARGS.read(request))
        body = {"query": query_name, "result": result}
        return Response(s.QueryResultSerializer(body, context={"request": request}).data)

    @document(
        summary="Send an update: validated, recorded once per update id, then handled",
        parameters=[UPDATE_NAME],
        request=s.UpdateRequestSerializer,
        responses={202: s.UpdateSerializer, 200: s.UpdateSerializer},
    )
    @action(detail=True, methods=["post"], url_path=UPDATE_PATH, url_name="update")
    def send_update(self, request: Request, workflow_id: str, update_name: str) -> Response:
        serializer = s.UpdateRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        update_id = data.get("update_id") or require_key(request)
        sent = Manager().update(
            workflow_id, update_name, data["payload"], update_id=update_id, wait=False
        )
        code = status.HTTP_202_ACCEPTED if sent.state == "accepted" else status.HTTP_200_OK
        body = s.UpdateSerializer(sent, context={"request": request}).data
        return Response(body, status=code)

    @document(
        summary="One update: accepted, succeeded (with its result) or failed",
        parameters=[UPDATE_NAME, UPDATE_ID],
        responses=s.UpdateSerializer,
    )
    @action(
        detail=True,
        methods=["get"],
        url_path=rf"{UPDATE_PATH}/(?P<update_id>{ID_REGEX})",
        url_name="update-detail",
    )
    def update_detail(
        self, request: Request, workflow_id: str, update_name: str, update_id: str
    ) -> Response:
        found = Manager().get_update(workflow_id, update_id)
        if found.name != update_name:
            raise NotFoundError(
                f"update {update_id} of execution {workflow_id} is not {update_name!r}"
            )
        return Response(s.UpdateSerializer(found, context={"request": request}).data)

    @document(
        summary="Cancel a running or suspended execution (no compensation runs)",
        request=s.ReasonSerializer,
        responses=s.ExecutionSerializer,
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, workflow_id: str) -> Response:
        Manager().cancel(workflow_id, **_reason(request))
        return _view(request, workflow_id)

    @document(
        summary="Stop replaying a running execution until resumed",
        request=s.ReasonSerializer,
        responses=s.ExecutionSerializer,
    )
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, workflow_id: str) -> Response:
        Manager().suspend(workflow_id, **_reason(request))
        return _view(request, workflow_id)

    @document(
        summary="Resume a suspended execution now", request=None, responses=s.ExecutionSerializer
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, workflow_id: str) -> Response:
        Manager().resume(workflow_id)
        return _view(request, workflow_id)

    @document(
        summary="Decide an uncertain Operation: complete, fail or retry",
        request=s.ResolveSerializer,
        responses=s.ExecutionSerializer,
    )
    @action(detail=True, methods=["post"], url_path="resolve-uncertain")
    def resolve_uncertain(self, request: Request, workflow_id: str) -> Response:
        serializer = s.ResolveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        run_id = Manager().get(workflow_id).run_id  # 404 for an unknown execution first
        job_id = data.get("job_id") or f"{run_id}:{data['command_id']}"
        if not is_operation_of(job_id, run_id):
            raise NotFoundError(f"{job_id} is not an Operation of execution {workflow_id}")
        Manager().resolve_uncertain(job_id, data["decision"], data["result"], data["error"])
        return _view(request, workflow_id)


def _reason(request: Request) -> dict[str, Any]:
    serializer = s.ReasonSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)

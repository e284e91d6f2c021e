"""``/workflows``: payload-free reads of a DAG workflow, signals, grafts, retry, cancel.

Signal payloads and sources are user data: null with ``redacted: true`` for a caller
without ``headgate_django.view_job_payload`` (:mod:`headgate_django.visibility`).

Workflow ids contain ``:`` (``onboarding:42``); the id segment matches anything but ``/``,
and ``onboarding%3A42`` arrives decoded, so both spellings reach the same workflow.
Signal emission uses the request's ``Idempotency-Key`` as the emission's idempotency key,
so the API and the Python ``emit_signal_with`` share one idempotency horizon.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api import query
from headgate_django.api.base import ID_REGEX, HeadgateViewSet
from headgate_django.api.idempotency import require_key
from headgate_django.api.pagination import limit_param
from headgate_django.api.schema import document
from headgate_django.api.serializers import workflows as s
from headgate_django.models import WorkflowCheckpoint
from headgate_django.registry import get_task
from headgate_django.workflows import (
    Recovery,
    SignalEmission,
    WorkflowGraft,
    cancel_workflow,
    emit_signal_with,
    inspect_workflow,
    list_signals,
    list_workflows,
    request_failed_subgraph_retry,
    submit_graft,
    workflow_events,
    workflow_node,
)

NODE_PATH = rf"nodes/(?P<node>{ID_REGEX})"
WORKFLOW_CURSOR = query.text("cursor", "`next_cursor` of the previous page (a workflow id).")
SIGNAL_CURSOR = query.integer(
    "cursor", 1, 2**63 - 1, "`next_cursor` of the previous page (an emission id)."
)
WORKFLOW_LIMIT = limit_param(50)
SIGNAL_LIMIT = limit_param(100)
NODE = OpenApiParameter("node", str, OpenApiParameter.PATH, description="Node name.")


class WorkflowViewSet(HeadgateViewSet):
    """DAG workflows; ids contain ``:`` and may be percent-encoded (``onboarding%3A42``)."""

    permission_model = WorkflowCheckpoint
    lookup_field = "workflow_id"
    lookup_value_regex = ID_REGEX

    @document(
        summary="Workflows (coordinators), ordered by id",
        parameters=[WORKFLOW_CURSOR.openapi(), WORKFLOW_LIMIT.openapi()],
        responses=s.WorkflowListSerializer,
    )
    def list(self, request: Request) -> Response:
        page = list_workflows(WORKFLOW_CURSOR.read(request), WORKFLOW_LIMIT.read(request, 50))
        body = {
            "workflows": s.WorkflowSummarySerializer(page.items, many=True).data,
            "next_cursor": page.next_cursor,
        }
        return Response(body)

    @document(
        summary="Snapshot: graph, node states, revision, generation (no payloads)",
        responses=s.WorkflowSnapshotSerializer,
    )
    def retrieve(self, request: Request, workflow_id: str) -> Response:
        return Response(s.WorkflowSnapshotSerializer(inspect_workflow(workflow_id)).data)

    @document(summary="One node", parameters=[NODE], responses=s.WorkflowNodeSerializer)
    @action(detail=True, methods=["get"], url_path=NODE_PATH, url_name="node")
    def node(self, request: Request, workflow_id: str, node: str) -> Response:
        return Response(s.WorkflowNodeSerializer(workflow_node(workflow_id, node)).data)

    @document(
        summary="A node's dependencies", parameters=[NODE], responses=s.DependenciesSerializer
    )
    @action(detail=True, methods=["get"], url_path=NODE_PATH + "/dependencies")
    def dependencies(self, request: Request, workflow_id: str, node: str) -> Response:
        return Response({"dependencies": list(workflow_node(workflow_id, node).dependencies)})

    @document(summary="A node's dependents", parameters=[NODE], responses=s.DependentsSerializer)
    @action(detail=True, methods=["get"], url_path=NODE_PATH + "/dependents")
    def dependents(self, request: Request, workflow_id: str, node: str) -> Response:
        return Response({"dependents": list(workflow_node(workflow_id, node).dependents)})

    @document(summary="Bounded history (newest 256 events)", responses=s.EventsSerializer)
    @action(detail=True, methods=["get"])
    def events(self, request: Request, workflow_id: str) -> Response:
        return Response({"events": workflow_events(workflow_id)})

    @document(
        summary="Signal history, newest first (the latest 100 are kept)",
        parameters=[SIGNAL_CURSOR.openapi(), SIGNAL_LIMIT.openapi()],
        responses=s.SignalListSerializer,
    )
    @action(detail=True, methods=["get"])
    def signals(self, request: Request, workflow_id: str) -> Response:
        limit = SIGNAL_LIMIT.read(request, 100)
        records = list_signals(workflow_id, before=SIGNAL_CURSOR.read(request), limit=limit)
        return Response(
            {
                "signals": s.SignalRecordSerializer(
                    records, many=True, context={"request": request}
                ).data,
                "next_cursor": records[-1].id if len(records) == limit else None,
            }
        )

    @document(
        summary="Emit a signal; the Idempotency-Key is the emission's idempotency key",
        request=s.SignalEmitSerializer,
        responses=s.SignalReceiptSerializer,
    )
    @signals.mapping.post
    def emit_signal(self, request: Request, workflow_id: str) -> Response:
        """The ``Idempotency-Key`` is the emission's idempotency key: the same key and
        content return the original record (``inserted: false``), other content is 409.
        ``source`` is caller-supplied metadata, not proof of identity: fill it from your
        authenticated principal, never from end-user input."""
        serializer = s.SignalEmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        emission = SignalEmission(
            data["signal"], require_key(request), data["payload"], data["source"]
        )
        receipt = emit_signal_with(workflow_id, emission)
        return Response(s.SignalReceiptSerializer(receipt, context={"request": request}).data)

    @document(
        summary="Graft ordinary tasks onto a running workflow at an expected revision",
        request=s.GraftSerializer,
        responses={202: s.GraftReceiptSerializer},
    )
    @action(detail=True, methods=["post"])
    def grafts(self, request: Request, workflow_id: str) -> Response:
        serializer = s.GraftSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        # submit_graft checks the revision and the combined graph under the coordinator's lock.
        graft = WorkflowGraft(workflow_id, data["expected_revision"])
        if "queue" in data:
            graft.queue(data["queue"])
        for task in data["tasks"]:
            graft.add(task["name"], _envelope(task), task["deps"])
        prepared = graft.prepare()
        receipt_id = submit_graft(prepared)
        return Response(
            {"receipt_id": receipt_id, "revision": prepared.revision},
            status=status.HTTP_202_ACCEPTED,
        )

    @document(
        summary="Failed-subgraph retry, with repairs for quarantined or undecodable nodes",
        request=s.RetrySerializer,
        responses=s.RetryReceiptSerializer,
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, workflow_id: str) -> Response:
        serializer = s.RetrySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        recoveries = [
            Recovery(
                node=r["node"],
                release_quarantine=r["release_quarantine"],
                payload=r.get("payload"),
                schema_version=r.get("schema_version"),
            )
            for r in data["recoveries"]
        ]
        receipt = request_failed_subgraph_retry(workflow_id, data["expected_revision"], recoveries)
        return Response(s.RetryReceiptSerializer(receipt).data)

    @document(
        summary="Cancel live nodes and the coordinator (and linked children by default)",
        request=s.CancelSerializer,
        responses=s.CancelResultSerializer,
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, workflow_id: str) -> Response:
        serializer = s.CancelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = cancel_workflow(workflow_id, serializer.validated_data["propagate_children"])
        return Response(result)


def _envelope(task: dict[str, Any]) -> Any:
    env = get_task(task["kind"]).envelope(*task.get("args", []), **task.get("kwargs", {}))
    changes = {k: task[k] for k in ("payload", "id", "queue", "schema_version") if k in task}
    return replace(env, **changes)

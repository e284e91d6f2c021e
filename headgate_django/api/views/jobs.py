"""``/jobs``: list (never payloads), detail, enqueue, operator verbs, explicit reads.

The payload (``include_payload=1``), the result, the output and the checkpoint are user
data: each needs ``headgate_django.view_job_payload`` (403 otherwise). Errors and progress
are diagnostics and need only ``view_job`` (see :mod:`headgate_django.visibility`).

Every state change goes through a store verb (:mod:`headgate_django.store.operator`), so
the API obeys the same state table and locks as the Python API; this module only
translates HTTP to those calls and their results back.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta

from django.db.models import QuerySet
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django import bulk, store
from headgate_django.api import query
from headgate_django.api.base import ID_REGEX, HeadgateGenericViewSet
from headgate_django.api.errors import NoResult
from headgate_django.api.filters import JobFilter, StrictFilterBackend, openapi_parameters
from headgate_django.api.pagination import cursor_pagination
from headgate_django.api.permissions import require_payload_permission
from headgate_django.api.schema import document
from headgate_django.api.serializers.admission import AdmissionSerializer
from headgate_django.api.serializers.bulk import BulkActionSerializer, BulkResultSerializer
from headgate_django.api.serializers.jobs import (
    STATES,
    SUMMARY_FIELDS,
    JobCheckpointSerializer,
    JobCountsSerializer,
    JobCreatedSerializer,
    JobCreateSerializer,
    JobDetailSerializer,
    JobEffectsSerializer,
    JobLogsSerializer,
    JobOutputSerializer,
    JobProgressSerializer,
    JobResultSerializer,
    JobSummarySerializer,
    ReplacePayloadSerializer,
    RescheduleSerializer,
)
from headgate_django.enqueue import enqueue_one
from headgate_django.exceptions import InvalidTransitionError, NotFoundError
from headgate_django.kernel.attempt_log import LEVELS, at_least
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store.attempt_logs import job_logs
from headgate_django.store.effects import job_effects
from headgate_django.store.index_hints import filtered_list
from headgate_django.store.output import job_output
from headgate_django.store.stats import job_counts

INCLUDE_PAYLOAD = query.flag(
    "include_payload",
    "Reveal the payload (base64). Needs `headgate_django.view_job_payload`.",
)
QUEUE = query.text("queue", "Count one queue only.")
LEVEL = query.choice("level", LEVELS, "Only entries of this level and above.")
FINISHED = (State.COMPLETED.value, State.CANCELLED.value, State.ARCHIVED.value)


def _job(pk: str, fields: list[str] | None = None) -> Job:
    # The attempt logs are the logs route's alone: the detail never reads them.
    qs = Job.objects.defer("logs") if fields is None else Job.objects.only(*fields)
    job = qs.filter(pk=pk).first()
    if job is None:
        raise NotFoundError(f"job {pk} does not exist", id=pk)
    return job


def _summary(pk: str) -> Response:
    return Response(JobSummarySerializer(_job(pk, SUMMARY_FIELDS)).data)


class JobViewSet(HeadgateGenericViewSet):
    """Jobs: reads need ``view_job``; verbs need ``change_job`` or ``operate``."""

    permission_model = Job
    queryset = Job.objects.all()
    lookup_value_regex = ID_REGEX
    filter_backends = [StrictFilterBackend]
    filterset_class = JobFilter
    # Keyset on the primary key alone: unique, so no page repeats or skips a row, and
    # generated ids are ULIDs, so this is newest first. (enqueued_at is not unique, and on
    # SQLite its millisecond text does not compare exactly with a microsecond parameter.)
    pagination_class = cursor_pagination("jobs", ("-id",))
    serializer_class = JobSummarySerializer

    def get_queryset(self) -> QuerySet[Job]:
        return Job.objects.only(*SUMMARY_FIELDS)

    @document(
        summary="List jobs (never payloads)",
        parameters=openapi_parameters(JobFilter),
        responses=JobSummarySerializer,
    )
    def list(self, request: Request) -> Response:
        """Newest first (by id). Never carries payloads, whatever is asked."""
        rows = filtered_list(
            self.filter_queryset(self.get_queryset()),
            states=request.query_params.getlist("state"),
            kinds=request.query_params.getlist("kind"),
        )
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(JobSummarySerializer(page, many=True).data)

    @document(
        summary="One job with its attempt timeline",
        parameters=[INCLUDE_PAYLOAD.openapi()],
        responses=JobDetailSerializer,
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        """``include_payload=1`` adds the base64 payload, for holders of
        ``headgate_django.view_job_payload`` only (403 otherwise)."""
        reveal = INCLUDE_PAYLOAD.read(request, False)
        if reveal:
            require_payload_permission(request)
        job = _job(pk)
        return Response(JobDetailSerializer(job, context={"include_payload": reveal}).data)

    @document(
        summary="Enqueue a job of a registered kind",
        request=JobCreateSerializer,
        responses={201: JobCreatedSerializer, 200: JobCreatedSerializer},
    )
    def create(self, request: Request) -> Response:
        """201 for a new job; 200 when a waiting holder of the unique key took the new
        values instead (``unique_replace``, ``unique_debounce``)."""
        serializer = JobCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        done = enqueue_one(serializer.envelope())
        return Response(
            {"id": done.id, "replaced": done.replaced},
            status=status.HTTP_200_OK if done.replaced else status.HTTP_201_CREATED,
        )

    @document(summary="Delete a job that is not running", responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        store.job_delete(pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- operator verbs ------------------------------------------------------------------

    @document(
        summary="Retry, cancel, delete, promote or reschedule every job a filter matches",
        request=BulkActionSerializer,
        responses={200: BulkResultSerializer, 202: BulkResultSerializer},
    )
    @action(detail=False, methods=["post"], filter_backends=[], pagination_class=None)
    def actions(self, request: Request) -> Response:
        """Guarded by ``expected_count`` (409 ``count_mismatch`` with the actual count,
        nothing changed); 413 above ``BULK_MAX_JOBS``; internal jobs are refused. Above
        ``BULK_SYNC_LIMIT`` the action runs as an internal job: 202 with its id."""
        serializer = BulkActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = bulk.perform(serializer.validated_data["action"], **serializer.call_kwargs())
        code = status.HTTP_200_OK if result.job_id is None else status.HTTP_202_ACCEPTED
        return Response(BulkResultSerializer(asdict(result)).data, status=code)

    @document(
        summary="Give an archived, cancelled or undecodable job fresh attempts",
        request=None,
        responses=JobSummarySerializer,
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        store.job_operator_retry(pk)
        return _summary(pk)

    @document(
        summary="Cancel an unfinished job (a running handler stops at its next fenced write)",
        request=None,
        responses=JobSummarySerializer,
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        if not store.job_cancel(pk):
            # Quarantined and undecodable jobs are refused too, and have not finished.
            state = _job(pk, ["state"]).state
            done = "has already finished" if state in FINISHED else "cannot be cancelled"
            raise InvalidTransitionError(f"job {pk} is {state}: it {done}", id=pk, state=state)
        return _summary(pk)

    @document(
        summary="Make a pending, scheduled or retryable job available now",
        request=None,
        responses=JobSummarySerializer,
    )
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str) -> Response:
        store.job_promote(pk)
        return _summary(pk)

    @document(
        summary="Run a pending or scheduled job at an instant or after a delay",
        request=RescheduleSerializer,
        responses=JobSummarySerializer,
    )
    @action(detail=True, methods=["post"])
    def reschedule(self, request: Request, pk: str) -> Response:
        serializer = RescheduleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if "delay_ms" in data:
            store.job_reschedule(pk, delay=timedelta(milliseconds=data["delay_ms"]))
        else:
            store.job_reschedule(pk, at=data["scheduled_at"])
        return _summary(pk)

    @document(
        summary="Replace the payload (typically of an undecodable job) before a retry",
        request=ReplacePayloadSerializer,
        responses=JobSummarySerializer,
    )
    @action(detail=True, methods=["put"])
    def payload(self, request: Request, pk: str) -> Response:
        serializer = ReplacePayloadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        store.job_replace_payload(
            pk, payload=data["payload"], schema_version=data.get("schema_version")
        )
        return _summary(pk)

    # -- explicit reads ------------------------------------------------------------------

    @document(
        summary="The result of a completed job (needs view_job_payload)",
        responses=JobResultSerializer,
    )
    @action(detail=True, methods=["get"])
    def result(self, request: Request, pk: str) -> Response:
        require_payload_permission(request)
        job = _job(pk, ["id", "state", "result"])
        if job.state != "completed":
            raise NoResult(f"job {pk} is {job.state}, not completed", state=job.state)
        return Response({"result": job.result})

    @document(
        summary="Why the job is or is not claimable now (admission explain)",
        responses=AdmissionSerializer,
    )
    @action(detail=True, methods=["get"])
    def admission(self, request: Request, pk: str) -> Response:
        from headgate_django.admission import explain

        return Response(AdmissionSerializer(asdict(explain(pk))).data)

    @document(
        summary="Step checkpoint and cursor position (needs view_job_payload)",
        responses=JobCheckpointSerializer,
    )
    @action(detail=True, methods=["get"])
    def checkpoint(self, request: Request, pk: str) -> Response:
        require_payload_permission(request)
        job = _job(pk, ["id", "checkpoint", "cp_cursor"])
        cursor = None if job.cp_cursor is None else bytes(job.cp_cursor)
        return Response(
            JobCheckpointSerializer({"checkpoint": job.checkpoint, "cursor": cursor}).data
        )

    @document(
        summary="The output a handler set with ctx.set_output (needs view_job_payload)",
        responses=JobOutputSerializer,
    )
    @action(detail=True, methods=["get"])
    def output(self, request: Request, pk: str) -> Response:
        require_payload_permission(request)
        found = job_output(pk)
        if found is None:
            raise NotFoundError(f"job {pk} does not exist", id=pk)
        return Response(
            JobOutputSerializer({"output": found.output, "updated_at": found.updated_at}).data
        )

    @document(
        summary="The job's at-most-once effects (ctx.once): names, results (needs "
        "view_job_payload), the fence that ran each",
        responses=JobEffectsSerializer,
    )
    @action(detail=True, methods=["get"])
    def effects(self, request: Request, pk: str) -> Response:
        require_payload_permission(request)
        found = job_effects(pk)
        if found is None:
            raise NotFoundError(f"job {pk} does not exist", id=pk)
        return Response(JobEffectsSerializer({"effects": [r._asdict() for r in found]}).data)

    @document(
        summary="What each attempt logged with ctx.log (newest 20 attempts)",
        parameters=[LEVEL.openapi()],
        responses=JobLogsSerializer,
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str) -> Response:
        """Diagnostics like errors (``view_job``); never part of the list or the detail."""
        level = LEVEL.read(request)
        attempts = job_logs(pk)
        if attempts is None:
            raise NotFoundError(f"job {pk} does not exist", id=pk)
        if level is not None:
            attempts = [{**a, "entries": at_least(a["entries"], level)} for a in attempts]
        return Response(JobLogsSerializer({"attempts": attempts}).data)

    @document(summary="Last reported progress", responses=JobProgressSerializer)
    @action(detail=True, methods=["get"])
    def progress(self, request: Request, pk: str) -> Response:
        job = _job(pk, ["id", "progress"])
        return Response({"progress": job.progress})

    @document(
        summary="Job counts by state", parameters=[QUEUE.openapi()], responses=JobCountsSerializer
    )
    @action(detail=False, methods=["get"], filter_backends=[], pagination_class=None)
    def counts(self, request: Request) -> Response:
        counts = job_counts(queue=QUEUE.read(request))
        estimated = [state for state in STATES if counts[state].estimated]
        return Response(
            {
                "counts": {state: counts[state].n for state in STATES},
                "total": sum(c.n for c in counts.values()),
                "approximate": bool(estimated),
                "estimated": estimated,
            }
        )

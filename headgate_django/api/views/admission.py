"""``/admission/…``: admission policies, read and changed at runtime.

A thin translation of :mod:`headgate_django.admission`: the same validation, effective on
the next claim or enqueue. Guarded like the queue switches (``QueueState``'s view
permission to read, change or ``operate`` to write), and every write takes an
Idempotency-Key like every mutation.
"""

from __future__ import annotations

from datetime import timedelta

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django import admission
from headgate_django.api.base import ID_REGEX, HeadgateViewSet
from headgate_django.api.schema import document
from headgate_django.api.serializers import admission as s
from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.names import MAX_QUEUE_BYTES, validate_rate_class
from headgate_django.models import QueueState

_NAME = {"type": "string", "pattern": f"^[A-Za-z0-9_][A-Za-z0-9_.:-]{{0,{MAX_QUEUE_BYTES - 1}}}$"}
QUEUE = OpenApiParameter("name", _NAME, OpenApiParameter.PATH, description="Queue name.")
CLASS = OpenApiParameter("name", _NAME, OpenApiParameter.PATH, description="Rate class name.")


class _PolicyViewSet(HeadgateViewSet):
    permission_model = QueueState
    lookup_field = "name"
    lookup_value_regex = ID_REGEX


class RateClassViewSet(_PolicyViewSet):
    """Token buckets shared by every worker; see ``admission.set_rate_class``."""

    @document(summary="Rate classes with their tokens now", responses=s.RateClassListSerializer)
    def list(self, request: Request) -> Response:
        return Response({"rate_classes": admission.rate_classes()})

    @document(
        summary="Create or change a rate class (takes effect on the next claim)",
        parameters=[CLASS],
        request=s.RateClassRequestSerializer,
        responses=s.RateClassSerializer,
    )
    def update(self, request: Request, name: str) -> Response:
        body = s.RateClassRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        admission.set_rate_class(
            name,
            limit=data["limit"],
            window=timedelta(milliseconds=data["window_ms"]),
            burst=data.get("burst"),
            paused=data["paused"],
        )
        return Response(next(c for c in admission.rate_classes() if c["name"] == name))

    @document(
        summary="Remove a rate class (its jobs become fail-open)",
        parameters=[CLASS],
        responses={204: None},
    )
    def destroy(self, request: Request, name: str) -> Response:
        validate_rate_class(name)
        if not admission.remove_rate_class(name):
            raise NotFoundError(f"rate class {name!r} does not exist", name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConcurrencyLimitViewSet(_PolicyViewSet):
    """Running jobs per partition of a queue; see ``admission.set_concurrency_limit``."""

    @document(summary="Concurrency ceilings by queue", responses=s.ConcurrencyLimitListSerializer)
    def list(self, request: Request) -> Response:
        return Response({"concurrency_limits": admission.concurrency_limits()})

    @document(
        summary="Set a queue's ceiling per partition (takes effect on the next claim)",
        parameters=[QUEUE],
        request=s.ConcurrencyLimitRequestSerializer,
        responses=s.ConcurrencyLimitSerializer,
    )
    def update(self, request: Request, name: str) -> Response:
        body = s.ConcurrencyLimitRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        admission.set_concurrency_limit(
            name, data["max_concurrent"], on_saturated=data["on_saturated"]
        )
        return Response({"queue": name, **data})

    @document(summary="Remove a queue's ceiling", parameters=[QUEUE], responses={204: None})
    def destroy(self, request: Request, name: str) -> Response:
        if not any(c["queue"] == name for c in admission.concurrency_limits()):
            raise NotFoundError(f"queue {name!r} has no concurrency ceiling", queue=name)
        admission.set_concurrency_limit(name, None)
        return Response(status=status.HTTP_204_NO_CONTENT)


class BackpressureViewSet(_PolicyViewSet):
    """Limits of unfinished jobs per queue; see ``admission.set_backpressure``."""

    @document(
        summary="Backpressure limits with current counts", responses=s.BackpressureListSerializer
    )
    def list(self, request: Request) -> Response:
        return Response({"backpressure": admission.backpressure_limits()})

    @document(
        summary="Set a queue's limit of unfinished jobs (0 closes intake)",
        parameters=[QUEUE],
        request=s.BackpressureRequestSerializer,
        responses=s.BackpressureSerializer,
    )
    def update(self, request: Request, name: str) -> Response:
        body = s.BackpressureRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        admission.set_backpressure(name, body.validated_data["max_unfinished"])
        return Response(next(b for b in admission.backpressure_limits() if b["queue"] == name))

    @document(
        summary="Remove a queue's backpressure limit", parameters=[QUEUE], responses={204: None}
    )
    def destroy(self, request: Request, name: str) -> Response:
        if not any(b["queue"] == name for b in admission.backpressure_limits()):
            raise NotFoundError(f"queue {name!r} has no backpressure limit", queue=name)
        admission.set_backpressure(name, None)
        return Response(status=status.HTTP_204_NO_CONTENT)


class QueueWeightViewSet(_PolicyViewSet):
    """Weights between the queues a worker serves; see ``admission.set_queue_weight``."""

    @document(
        summary="Queue weights with their ledgers and backlogs",
        responses=s.QueueWeightListSerializer,
    )
    def list(self, request: Request) -> Response:
        return Response({"queue_weights": admission.queue_weights()})

    @document(
        summary="Set a queue's weight (takes effect on the next claim)",
        parameters=[QUEUE],
        request=s.QueueWeightRequestSerializer,
        responses=s.QueueWeightSerializer,
    )
    def update(self, request: Request, name: str) -> Response:
        body = s.QueueWeightRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        admission.set_queue_weight(name, body.validated_data["weight"])
        return Response(next(w for w in admission.queue_weights() if w["queue"] == name))

    @document(summary="Remove a queue's weight", parameters=[QUEUE], responses={204: None})
    def destroy(self, request: Request, name: str) -> Response:
        if not admission.remove_queue_weight(name):
            raise NotFoundError(f"queue {name!r} has no weight", queue=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class FairnessViewSet(_PolicyViewSet):
    """Tenant fairness inside a queue; see ``admission.set_fairness``."""

    @document(
        summary="Fair queues and where their rotations stand", responses=s.FairnessListSerializer
    )
    def list(self, request: Request) -> Response:
        return Response({"fairness": admission.fair_queues()})

    @document(
        summary="Make a queue fair between its partitions (takes effect on the next claim)",
        parameters=[QUEUE],
        request=s.FairnessRequestSerializer,
        responses=s.FairnessSerializer,
    )
    def update(self, request: Request, name: str) -> Response:
        body = s.FairnessRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        admission.set_fairness(name, **body.validated_data)
        return Response(next(f for f in admission.fair_queues() if f["queue"] == name))

    @document(
        summary="Claim a queue in plain order again", parameters=[QUEUE], responses={204: None}
    )
    def destroy(self, request: Request, name: str) -> Response:
        if not admission.remove_fairness(name):
            raise NotFoundError(f"queue {name!r} is not fair", queue=name)
        return Response(status=status.HTTP_204_NO_CONTENT)

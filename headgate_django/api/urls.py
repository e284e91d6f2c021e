"""Routes of the control API, all under ``v1/``.

Mount it in the project's URLconf::

    path("api/", include("headgate_django.api.urls"))

which serves ``/api/v1/…``, with an index at ``/api/v1/``. Paths have no trailing slash (as
in Headgate's API), except the index, schema and docs pages; ``…/jobs/`` is redirected to
``…/jobs``. Anything else under ``v1/`` is a 404 in the error envelope — newlines
included: Django decodes ``%0A`` before routing, and ``.`` does not match a newline, so
the catch-all is a character class that matches newlines too (Django cannot reverse a
``(?s)`` flag).
"""

from __future__ import annotations

from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from headgate_django.api.errors import not_found
from headgate_django.api.schema_views import RedocView, SchemaView, SwaggerView, docs_asset
from headgate_django.api.views.admission import (
    BackpressureViewSet,
    ConcurrencyLimitViewSet,
    FairnessViewSet,
    QueueWeightViewSet,
    RateClassViewSet,
)
from headgate_django.api.views.durable import ExecutionViewSet
from headgate_django.api.views.health import HealthzView, MetaView, ReadyzView
from headgate_django.api.views.index import IndexView, add_slash, strip_slash
from headgate_django.api.views.jobs import JobViewSet
from headgate_django.api.views.queues import QuarantineViewSet, QueueViewSet
from headgate_django.api.views.schedules import ScheduleViewSet
from headgate_django.api.views.workers import WorkerViewSet
from headgate_django.api.views.workflows import WorkflowViewSet

app_name = "headgate_api"

router = SimpleRouter(trailing_slash=False)
router.register("jobs", JobViewSet, basename="job")
router.register("queues", QueueViewSet, basename="queue")
router.register("quarantine", QuarantineViewSet, basename="quarantine")
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("durable/executions", ExecutionViewSet, basename="execution")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("workers", WorkerViewSet, basename="worker")
router.register("admission/rate-classes", RateClassViewSet, basename="rate-class")
router.register(
    "admission/concurrency-limits", ConcurrencyLimitViewSet, basename="concurrency-limit"
)
router.register("admission/backpressure", BackpressureViewSet, basename="backpressure")
router.register("admission/queue-weights", QueueWeightViewSet, basename="queue-weight")
router.register("admission/fairness", FairnessViewSet, basename="fairness")

v1 = [
    path("healthz", HealthzView.as_view(), name="healthz"),
    path("readyz", ReadyzView.as_view(), name="readyz"),
    path("meta", MetaView.as_view(), name="meta"),
    path("", IndexView.as_view(), name="index"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SwaggerView.as_view(url_name="headgate_api:schema"), name="docs"),
    path("docs/assets/<str:name>", docs_asset, name="docs-asset"),
    path("redoc/", RedocView.as_view(url_name="headgate_api:schema"), name="redoc"),
    re_path(r"^(?:schema|docs|redoc)$", add_slash),
    *router.urls,
    re_path(r"^(?P<path>.+)/$", strip_slash),
    re_path(r"^[\s\S]*$", not_found),
]

urlpatterns = [path("v1/", include(v1)), re_path(r"^v1\s*$", not_found)]

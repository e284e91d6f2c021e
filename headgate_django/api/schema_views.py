"""``/v1/schema/`` (OpenAPI 3, JSON by default, ``?format=yaml``) and ``/v1/docs/``
(Swagger UI, only while ``DEBUG`` is on). Both need an authenticated user, like every
route, and answer errors in the API's envelope.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api.base import HeadgateViewMixin
from headgate_django.api.permissions import IsAuthenticated
from headgate_django.api.schema import SPECTACULAR_SETTINGS, document


class SchemaView(HeadgateViewMixin, SpectacularAPIView):
    renderer_classes = [OpenApiJsonRenderer, OpenApiYamlRenderer]
    permission_classes = [IsAuthenticated]
    custom_settings = SPECTACULAR_SETTINGS

    @document(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class SwaggerView(HeadgateViewMixin, SpectacularSwaggerView):
    renderer_classes = [*SpectacularSwaggerView.renderer_classes, JSONRenderer]
    permission_classes = [IsAuthenticated]
    title = SPECTACULAR_SETTINGS["TITLE"]

    @document(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not settings.DEBUG:
            raise Http404("the API docs page is served only with DEBUG on")
        return super().get(request, *args, **kwargs)

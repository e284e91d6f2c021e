"""``/v1/schema/`` (OpenAPI 3: JSON by default and for ``Accept: application/json``, YAML
for ``?format=yaml`` or ``Accept: application/yaml``), and the docs pages ``/v1/docs/``
(Swagger UI) and ``/v1/redoc/`` (ReDoc), only while ``DEBUG`` is on.

The docs pages load their scripts and styles from ``/v1/docs/assets/``, served from the
``drf-spectacular-sidecar`` package: they work offline and without adding the sidecar to
``INSTALLED_APPS`` or configuring static files. Their templates are drf-spectacular's, so
``drf_spectacular`` itself must be installed (check ``headgate.W005``). Every route needs
an authenticated user (the assets excepted: they hold no data) and answers errors in the
API's envelope.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.urls import reverse
from drf_spectacular.renderers import (
    OpenApiJsonRenderer,
    OpenApiJsonRenderer2,
    OpenApiYamlRenderer,
    OpenApiYamlRenderer2,
)
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from headgate_django.api.base import HeadgateViewMixin
from headgate_django.api.errors import not_found
from headgate_django.api.permissions import IsAuthenticated
from headgate_django.api.schema import SPECTACULAR_SETTINGS, document

#: What the docs pages load, by the name they load it under: nothing else is served.
_ASSETS = {
    "swagger-ui.css": "swagger-ui-dist/swagger-ui.css",
    "swagger-ui-bundle.js": "swagger-ui-dist/swagger-ui-bundle.js",
    "swagger-ui-standalone-preset.js": "swagger-ui-dist/swagger-ui-standalone-preset.js",
    "favicon-32x32.png": "swagger-ui-dist/favicon-32x32.png",
    "redoc.standalone.js": "redoc/bundles/redoc.standalone.js",
}


def _asset_url(name: str) -> str:
    return reverse("headgate_api:docs-asset", args=[name])


def _debug_only() -> None:
    if not settings.DEBUG:
        raise Http404("the API docs pages are served only with DEBUG on")


class SchemaView(HeadgateViewMixin, SpectacularAPIView):
    renderer_classes = [
        OpenApiJsonRenderer,
        OpenApiJsonRenderer2,
        OpenApiYamlRenderer,
        OpenApiYamlRenderer2,
    ]
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
        _debug_only()
        return super().get(request, *args, **kwargs)

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return _asset_url(filename)

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return _asset_url("favicon-32x32.png")


class RedocView(HeadgateViewMixin, SpectacularRedocView):
    renderer_classes = [*SpectacularRedocView.renderer_classes, JSONRenderer]
    permission_classes = [IsAuthenticated]
    title = SPECTACULAR_SETTINGS["TITLE"]
    # drf-spectacular's own page also asks Google for its fonts; this one asks nobody.
    template_name = "headgate_django/api/redoc.html"

    @document(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        _debug_only()
        return super().get(request, *args, **kwargs)

    @staticmethod
    def _redoc_standalone() -> str:
        return _asset_url("redoc.standalone.js")


def docs_asset(request: HttpRequest, name: str) -> HttpResponseBase:
    """One file the docs pages load, from the sidecar package; a 404 for anything else."""
    if not settings.DEBUG or name not in _ASSETS:
        return not_found(request)
    import drf_spectacular_sidecar

    root = Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar"
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return FileResponse((root / _ASSETS[name]).open("rb"), content_type=content_type)

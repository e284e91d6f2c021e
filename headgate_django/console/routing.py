"""WebSocket routes of the console; mount them in your project's ASGI application::

    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter, URLRouter
    from channels.security.websocket import AllowedHostsOriginValidator
    from headgate_django.console.routing import websocket_urlpatterns

    application = ProtocolTypeRouter({
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    })

The pages connect to ``/ws/headgate/...`` on the host that served them.
"""

from __future__ import annotations

from django.urls import path

from headgate_django.console.consumers import (
    ExecutionConsumer,
    JobConsumer,
    JobListConsumer,
    OverviewConsumer,
    SchedulesConsumer,
    WorkersConsumer,
    WorkflowConsumer,
)

websocket_urlpatterns = [
    path("ws/headgate/overview/", OverviewConsumer.as_asgi()),
    path("ws/headgate/workers/", WorkersConsumer.as_asgi()),
    path("ws/headgate/jobs/", JobListConsumer.as_asgi()),
    path("ws/headgate/job/<path:job_id>/", JobConsumer.as_asgi()),
    path("ws/headgate/workflows/<path:workflow_id>/", WorkflowConsumer.as_asgi()),
    path("ws/headgate/executions/<path:execution_id>/", ExecutionConsumer.as_asgi()),
    path("ws/headgate/schedules/", SchedulesConsumer.as_asgi()),
]

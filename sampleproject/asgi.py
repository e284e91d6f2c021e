"""ASGI entry point: Django for HTTP, the headgate console's live pages over WebSocket.

WebSocket connections get the Django session user (``AuthMiddlewareStack``; the console
consumers refuse anyone but staff) and must come from a page of an allowed host
(``AllowedHostsOriginValidator``), which stops another site from opening a socket with
the operator's cookies. See docs/console.md.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sampleproject.settings")
django_asgi_app = get_asgi_application()  # set up Django before importing consumers

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from headgate_django.console.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

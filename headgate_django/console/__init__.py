"""The console: read-only admin pages and live console pages under the admin site.

The one thing a project wires itself is :data:`headgate_django.console.routing.websocket_urlpatterns`
(its ASGI application); the admin pages and console URLs come with ``admin.site``.

Module map: ``readonly`` (the read-only ModelAdmin base), ``admin_durable`` (durable and API
admins; the rest are in ``headgate_django.admin``), ``urls`` and ``views`` (console pages),
``snapshots``/``executions`` (what a page shows, and diffs), ``layout`` (igraph layout),
``consumers``/``routing`` (WebSockets), ``shared`` (one read per view, shared by its
sockets), ``publish``/``groups`` (worker → page wake-ups), ``access`` and ``links``
(permissions, admin URLs). Reads go through ``store.console``.
"""

__all__: list[str] = []

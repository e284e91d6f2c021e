"""The HTTP control API: DRF views under ``/api/v1/`` for jobs, queues, quarantine, DAG
workflows and durable executions.

Mount it with ``path("api/", include("headgate_django.api.urls"))``; see ``docs/api.md``.
The package is an edge: it translates HTTP to the store verbs and the workflow and durable
APIs and back, and holds no business rules. One module per concern:

- :mod:`.base` — what every view shares (JSON, permissions, 413/415, Idempotency-Key);
- :mod:`.errors` — the error envelope, mapped in one place;
- :mod:`.idempotency` — response replay for a repeated Idempotency-Key;
- :mod:`.permissions`, :mod:`.pagination`, :mod:`.filters`, :mod:`.schema`;
- :mod:`.serializers` and :mod:`.views` — one module per resource; :mod:`.urls`.
"""

"""Request and response shapes of the API, one module per resource.

Responses are declared field by field (not ``fields = "__all__"``) so the OpenAPI schema
is exact — schemathesis checks every response against it — and so no new model column
(a payload, a cursor) can leak into a response by accident.
"""

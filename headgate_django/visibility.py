"""Who may read user data: one rule for the API, the admin, the console pages and sockets.

*User data* is what callers and handlers store as values: job payloads, results, step
checkpoints and cursor positions; signal payloads and sources; durable inputs, results,
meta and the values inside history events; signal-inbox payloads; quarantine samples;
stored API responses (they may hold any of these). Reading it needs
:data:`REVEAL_PAYLOADS` ("Can view job payloads") on top of the view permission of the
route or page, everywhere. Without it:

- a route whose whole answer is user data refuses (API: 403 ``payload_permission_required``);
- an answer that carries user data among other fields keeps its shape, with those fields
  null and ``redacted: true`` (API) or absent with ``revealed: false`` (console snapshots,
  embedded in pages and sent over the sockets); admin pages show a notice in their place
  and refuse changelist filters on those columns, which would otherwise be an oracle.

Shown with the view permission alone, because operators need them and they are not the
values callers hand over: ids and keys (job, workflow and execution ids, unique,
idempotency and business keys, fingerprints), kinds, names, states, counts, instants, the
graph with its CEL conditions, and diagnostics the project's own code writes — error
messages and tracebacks, failure, suspension and uncertainty reasons, progress. Keep
secrets out of those.
"""

from __future__ import annotations

from typing import Any

REVEAL_PAYLOADS = "headgate_django.view_job_payload"

#: Per model (``_meta.model_name``), the columns that hold user data. A signal's content
#: hash is listed too: it confirms a guessed payload.
PRIVATE_FIELDS: dict[str, frozenset[str]] = {
    "job": frozenset({"payload", "result", "checkpoint", "cp_cursor", "output"}),
    "quarantine": frozenset({"sample_payload"}),
    "schedule": frozenset({"target"}),  # the template of the jobs it enqueues, payload included
    "signalemission": frozenset({"payload", "source", "content_hash"}),
    "execution": frozenset({"input", "result", "meta"}),
    "historyevent": frozenset({"payload"}),
    "executionrun": frozenset({"input"}),  # the input of a run that continued as new
    "runhistoryevent": frozenset({"payload"}),
    "effect": frozenset({"result"}),  # what an at-most-once effect returned
    "signalinbox": frozenset({"payload"}),
    "idempotencyrecord": frozenset({"response_body"}),
}

#: Keys of a durable history event's payload that hold user values; the others (command
#: ids, names, versions, durations, decisions, reasons) are bookkeeping.
PRIVATE_EVENT_KEYS = frozenset({"input", "result", "payload"})


def may_see_payloads(user: Any) -> bool:
    """True for an authenticated user holding :data:`REVEAL_PAYLOADS` (superusers do)."""
    return bool(
        user is not None
        and getattr(user, "is_authenticated", False)
        and user.has_perm(REVEAL_PAYLOADS)
    )


def private_fields(model: Any) -> frozenset[str]:
    """The user-data columns of a headgate model (none for other models)."""
    return PRIVATE_FIELDS.get(model._meta.model_name, frozenset())


def public_event_values(payload: Any) -> dict[str, Any]:
    """A durable history event's payload without its user values."""
    if not isinstance(payload, dict):
        return {}
    return {k: v for k, v in payload.items() if k not in PRIVATE_EVENT_KEYS}

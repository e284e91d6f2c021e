"""schemathesis hooks of the live run (``run_schemathesis.py`` loads this file).

Two things a schema cannot carry, supplied the way schemathesis asks for test data:

- **Fresh idempotency keys.** The server remembers each successful mutation's key (per
  user, for a day); the same key with another request is a 409 ``idempotency_key_reused``.
  The generator draws keys from a small space (``"0"`` in every coverage case), so without
  this nearly every mutation after the first collided and no success path was reached.
  A schema-valid key is replaced by a digest of itself and the request, so one request
  sent twice still replays (that path stays exercised) while two different requests no
  longer collide. A missing or malformed key is left alone: refusing it is under test.
- **The sample project's registered names** (task kinds, durable workflows, a declared
  signal, a schedule spec) as ``example`` values in this run's copy of the schema. The
  served schema does not list them: it is readable by any authenticated user, including
  one without any of this API's permissions, and a deployment's task and workflow names
  are its own business (docs/api.md). They are test data for one known project, as ids
  are, so they are read from that project's registries here, not written into the API.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import schemathesis

#: The ``Idempotency-Key`` header's rule (``headgate_django.api.schema.IDEMPOTENCY_KEY``).
_VALID_KEY = re.compile(r"[!-~]{1,255}\Z")


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    key = (case.headers or {}).get("Idempotency-Key")
    if not isinstance(key, str) or not _VALID_KEY.match(key):
        return
    request = [key, case.method, case.formatted_path, case.query, case.body]
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=repr).encode())
    case.headers["Idempotency-Key"] = f"st-{digest.hexdigest()}"


def _examples() -> dict[str, dict[str, Any]]:
    """``{component: {property: example}}`` from the sample project's registries."""
    import django

    django.setup()
    from headgate_django.durable.registry import registered_workflows
    from headgate_django.registry import registered_kinds

    # Its one argument has a default: a body without args or kwargs enqueues it.
    kind = next(k for k in registered_kinds() if k.endswith(".import_pages"))
    workflow = registered_workflows()[0]
    durable = {"name": workflow.name, "version": workflow.version}
    return {
        "JobCreateRequest": {"kind": kind},
        "GraftTaskRequest": {"kind": kind},
        "UpsertRequest": {"task": kind, "spec": "@every 30s"},
        "StartRequest": durable,
        "SignalWithStartRequest": durable,
        "DurableTargetRequest": durable,
        # The onboarding workflow of the demo waits for it (sampleproject/demo/workflows.py).
        "SignalEmitRequest": {"signal": "approved"},
    }


@schemathesis.hook
def before_load_schema(context: Any, raw_schema: dict[str, Any]) -> None:
    components = raw_schema["components"]["schemas"]
    for component, values in _examples().items():
        for name, value in values.items():
            components[component]["properties"][name]["example"] = value

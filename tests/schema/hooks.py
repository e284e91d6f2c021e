"""schemathesis hooks of the live run (``run_schemathesis.py`` loads this file).

Three things a schema cannot carry, supplied the way schemathesis asks for test data:

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
- **Pairings** of what the generator draws apart (below, ``map_case``): which workflow
  declares which signal, which workflow has failed and can be retried, which jobs are
  a user's, which target a schedule may name. Read from the seeded database.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any
from urllib.parse import unquote

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


@functools.cache
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


# -- pairing what the generator draws apart ------------------------------------------
#
# The generator draws a path's id and a body independently, so a positive case names a
# workflow and a signal it does not declare, or a job the API keeps to itself; such a
# case is a 422 whatever the server does right, and an operation whose every case is
# one never shows its success path. The hooks below pair them the way a client does,
# for positive cases only (negative ones are under test as generated), from the seeded
# database as it stands when the run starts (``seed.py`` on top of ``manage.py demo``).


def _is_positive(case: Any) -> bool:
    from schemathesis import GenerationMode

    meta = case.meta
    return meta is not None and meta.generation.mode == GenerationMode.POSITIVE


class _Seeded:
    """What the seeded database holds that the pairing needs, read once, lazily (the
    schema is loaded first, and with it Django)."""

    def __init__(self) -> None:
        from headgate_django.models import Job
        from headgate_django.workflows import inspect_workflow, list_workflows

        snapshots = [inspect_workflow(w.workflow_id) for w in list_workflows(limit=200).items]
        #: ``{workflow_id: [declared signal, …]}`` and the reverse, for signals.
        self.signals = {s.workflow_id: [n.signal for n in s.nodes if n.signal] for s in snapshots}
        self.waiting_for = {sig: wf for wf, sigs in self.signals.items() for sig in sigs}
        #: Failed, retry-ready workflows not yet reopened, one per phase.
        self.retryable = [s.workflow_id for s in snapshots if s.failed and s.failed_subgraph_retry]
        #: The demo's own jobs, cancellable or not.
        self.user_jobs = list(
            Job.objects.filter(workflow_id__isnull=True).order_by("id").values_list("id", flat=True)
        )
        self._next_job = 0

    def user_job(self) -> str:
        """The demo's jobs in turn: a cancel finds one still available for a while."""
        job_id = self.user_jobs[self._next_job % len(self.user_jobs)]
        self._next_job += 1
        return job_id


_seeded: _Seeded | None = None


def _seed() -> _Seeded:
    global _seeded
    if _seeded is None:
        _seeded = _Seeded()
    return _seeded


@schemathesis.hook("map_case").apply_to(
    method="POST", path_regex=r"/workflows/\{workflow_id\}/signals$"
)
def pair_signal(context: Any, case: Any) -> Any:
    """A declared signal for a workflow that declares some; a workflow that waits for a
    signal some workflow declares. Undeclared names to other workflows stay as drawn."""
    if not _is_positive(case) or not isinstance(case.body, dict):
        return case
    seeded = _seed()
    workflow_id = unquote(str(case.path_parameters.get("workflow_id", "")))
    declared = seeded.signals.get(workflow_id)
    signal = case.body.get("signal")
    if declared and signal not in declared:
        case.body["signal"] = declared[0]
    elif not declared and signal in seeded.waiting_for:
        case.path_parameters["workflow_id"] = seeded.waiting_for[signal]
    return case


@schemathesis.hook("map_case").apply_to(
    method="POST", path_regex=r"/workflows/\{workflow_id\}/retry$"
)
def pair_retry(context: Any, case: Any) -> Any:
    """A retry without repairs at revision 1 goes to a failed workflow that needs none
    (a reopened one stays reopened: no worker runs, so the next one is used)."""
    body = case.body
    if (
        not _is_positive(case)
        or not isinstance(body, dict)
        or body.get("expected_revision") != 1
        or body.get("recoveries")
    ):
        return case
    seeded = _seed()
    if seeded.retryable:
        case.path_parameters["workflow_id"] = seeded.retryable[0]
    return case


@schemathesis.hook("map_case").apply_to(
    method=["POST", "DELETE"], path_regex=r"/jobs/\{id\}(/[a-z-]+)?$"
)
def pair_job_action(context: Any, case: Any) -> Any:
    """An internal job's id (a coordinator, a signal node, a durable task, taken from an
    earlier response) is swapped for one of the demo's own jobs: the actions on a job are
    for the jobs users enqueue. The kind is read when the case is made, as the run
    creates such jobs too."""
    from headgate_django.kernel.names import is_internal_kind
    from headgate_django.models import Job

    if not _is_positive(case):
        return case
    job_id = unquote(str(case.path_parameters.get("id", "")))
    kind = Job.objects.filter(pk=job_id).values_list("kind", flat=True).first()
    if kind is not None and is_internal_kind(kind):
        case.path_parameters["id"] = _seed().user_job()
    return case


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    """A retry that reopened a seeded workflow used it up."""
    if response.status_code == 200 and case.operation.path.endswith("/{workflow_id}/retry"):
        workflow_id = unquote(str(case.path_parameters.get("workflow_id", "")))
        seeded = _seed()
        if workflow_id in seeded.retryable:
            seeded.retryable.remove(workflow_id)


@schemathesis.hook("map_case").apply_to(method="PUT", path_regex=r"/schedules/\{name\}$")
def pair_schedule_target(context: Any, case: Any) -> Any:
    """A drawn target name becomes a registered one of its type, and an ``@every`` spec
    loses the time zone it cannot use. The spec itself stays as drawn."""
    body = case.body
    if not _is_positive(case) or not isinstance(body, dict):
        return case
    examples = _examples()["UpsertRequest"]
    if "task" in body:
        body["task"] = examples["task"]
        body.pop("args", None)
        body.pop("kwargs", None)
    if "durable" in body:
        body["durable"] = dict(_examples()["DurableTargetRequest"])
    if isinstance(body.get("spec"), str) and body["spec"].startswith("@every"):
        body.pop("tz", None)
    return case

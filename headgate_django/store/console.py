"""Reads the console needs beyond the public inspection calls: change fingerprints, per-node
job detail, filtered workflow pages, durable execution detail. All bounded, payload-free.

A *fingerprint* is a small tuple that changes whenever something a console page shows
changes. A live page's consumer recomputes it every half second on the embedded default
(where workers in other processes cannot reach it), so it must stay a handful of indexed
aggregates: it reads ``headgate_job`` through its ``workflow_id`` index and never touches
payloads. It deliberately ignores the coordinator's (or durable task's) own ``claimed_at``
and ``scheduled_at``: those move on every tick of a waiting workflow and would make every
poll look like a change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Count, Max, Sum

from headgate_django.models import (
    Execution,
    ExecutionRun,
    HistoryEvent,
    Job,
    SignalEmission,
    WorkflowCheckpoint,
)
from headgate_django.store.index_hints import filtered_list, job_filters_indexed, prefix_search
from headgate_django.store.index_hints import prefix as index_prefix
from headgate_django.store.windows import newest_window
from headgate_django.store.workflows import COORDINATOR_KIND, GRAFT_KIND, RETRY_KIND

_CHUNK = 500
#: Kinds whose rows are a workflow's or execution's own driver, not a node or Operation.
_DRIVER_KINDS = (COORDINATOR_KIND, "headgate:durable-task")


def _jobs_fingerprint(group: str, using: str) -> tuple[Any, ...]:
    """Per-state counts and latest instants of a group's jobs, drivers excepted."""
    rows = (
        Job.objects.using(using)
        .filter(workflow_id=group)
        .exclude(kind__in=_DRIVER_KINDS)
        .values("state")
        .annotate(
            n=Count("id"),
            finalized=Max("finalized_at"),
            claimed=Max("claimed_at"),
            scheduled=Max("scheduled_at"),
            attempts=Sum("attempt"),
            crashes=Sum("crash_attempt"),
        )
        .order_by("state")
    )
    finished_drivers = (
        Job.objects.using(using)
        .filter(workflow_id=group, kind__in=_DRIVER_KINDS, finalized_at__isnull=False)
        .values_list("id", "state", "finalized_at")
        .order_by("id")
    )
    return tuple(tuple(r.values()) for r in rows), tuple(finished_drivers)


def workflow_fingerprint(workflow_id: str, *, using: str = "default") -> tuple[Any, ...]:
    """Changes when a node's job, the workflow's history or its signals change."""
    checkpoint = (
        WorkflowCheckpoint.objects.using(using)
        .filter(pk=workflow_id)
        .values_list("revision", "generation", "next_sequence", "failed", "outcome")
        .first()
    )
    signals = (
        SignalEmission.objects.using(using)
        .filter(workflow_id=workflow_id)
        .aggregate(last=Max("id"))["last"]
    )
    return (_jobs_fingerprint(workflow_id, using), checkpoint, signals)


def execution_fingerprint(
    execution_id: str, group: str, *, using: str = "default"
) -> tuple[Any, ...]:
    """Changes when the execution's header, history or Operation jobs change."""
    header = (
        Execution.objects.using(using)
        .filter(pk=execution_id)
        .values_list("state", "last_seq", "suspended_reason", "finished_at")
        .first()
    )
    return (_jobs_fingerprint(group, using), header)


def node_job_details(
    job_ids: Iterable[str], *, using: str = "default"
) -> dict[str, dict[str, Any]]:
    """Attempts, timing and the newest error of each job, by id; absent rows are absent."""
    ids = list(job_ids)
    found: dict[str, dict[str, Any]] = {}
    fields = (
        "id",
        "state",
        "queue",
        "attempt",
        "crash_attempt",
        "max_attempts",
        "scheduled_at",
        "claimed_at",
        "finalized_at",
        "errors",
    )
    for start in range(0, len(ids), _CHUNK):
        for row in (
            Job.objects.using(using).filter(pk__in=ids[start : start + _CHUNK]).values(*fields)
        ):
            errors = row.pop("errors") or []
            row["last_error"] = errors[-1] if errors else None
            found[row["id"]] = row
    return found


def workflow_page(
    *,
    after: str | None = None,
    limit: int = 50,
    state: str | None = None,
    queue: str | None = None,
    prefix: str | None = None,
    using: str = "default",
) -> list[dict[str, Any]]:
    """Coordinators ordered by workflow id, filtered; the cursor is the last workflow id."""
    # Not NULL (a coordinator's never is): see store.workflows.workflow_coordinators.
    qs = Job.objects.using(using).filter(kind=COORDINATOR_KIND, workflow_id__isnull=False)
    if state:
        qs = qs.filter(state=state)
    if queue:
        qs = qs.filter(queue=queue)
    if prefix:
        qs = qs.filter(index_prefix("workflow_id", prefix, using=using))
    if after is not None:
        qs = qs.filter(workflow_id__gt=after)
    rows = qs.order_by("workflow_id").values(
        "workflow_id", "id", "state", "queue", "enqueued_at", "finalized_at"
    )[:limit]
    return [dict(row) for row in rows]


#: How many coordinators the workflow list's queue filter looks at for its choices.
_QUEUE_SAMPLE = 1000


def workflow_queues(*, using: str = "default") -> list[str]:
    """The queues coordinators live in (a handful), for the list's filter: those of the
    first :data:`_QUEUE_SAMPLE` workflows by id, read through the coordinators' index
    rather than a ``DISTINCT`` over every workflow ever kept."""
    sample = (
        Job.objects.using(using)
        .filter(kind=COORDINATOR_KIND, workflow_id__isnull=False)
        .order_by("workflow_id")
        .values_list("queue", flat=True)[:_QUEUE_SAMPLE]
    )
    return sorted(set(sample))


def workflow_progress(
    workflow_ids: Sequence[str], *, using: str = "default"
) -> dict[str, dict[str, int]]:
    """``{workflow_id: {state: n}}`` over the node jobs of one page of workflows (the
    coordinator and graft/retry receipts are not nodes)."""
    progress: dict[str, dict[str, int]] = {w: {} for w in workflow_ids}
    rows = (
        Job.objects.using(using)
        .filter(workflow_id__in=list(workflow_ids))
        .exclude(kind__in=(COORDINATOR_KIND, GRAFT_KIND, RETRY_KIND))
        .values("workflow_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        progress[str(row["workflow_id"])][row["state"]] = row["n"]
    return progress


def execution_detail(
    execution_id: str, *, using: str = "default"
) -> tuple[Execution, list[HistoryEvent]] | None:
    """The header and the whole history (seq order) of one execution."""
    header = Execution.objects.using(using).filter(pk=execution_id).first()
    if header is None:
        return None
    history = list(
        HistoryEvent.objects.using(using).filter(execution_id=execution_id).order_by("seq")
    )
    return header, history


def execution_finished_runs(execution_id: str, *, using: str = "default") -> list[ExecutionRun]:
    """The execution's finished runs (continue-as-new), oldest first, without their input."""
    runs = ExecutionRun.objects.using(using).filter(execution_id=execution_id)
    return list(runs.order_by("number").defer("input"))


def execution_jobs(group: str, *, using: str = "default") -> dict[str, dict[str, Any]]:
    """The execution's jobs (task and Operations) by id, with their attempts."""
    rows = (
        Job.objects.using(using)
        .filter(workflow_id=group)
        .values("id", "kind", "state", "attempt", "max_attempts", "checkpoint")
    )
    return {r["id"]: dict(r) for r in rows}


def job_page_fingerprint(
    *,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    search: str | None = None,
    limit: int = 100,
    using: str = "default",
) -> tuple[Any, ...]:
    """What the first page of the job list shows, newest first: changes when a job joins
    the page or one of its jobs moves. The same filters, search and order as the admin
    list (``-id``; :mod:`.index_hints`), so the same indexes serve it, and the same window
    of the newest jobs (:mod:`.windows`) bounds it when none does."""
    qs = Job.objects.using(using).all()
    if state:
        qs = qs.filter(state=state)
    if queue:
        qs = qs.filter(queue=queue)
    if kind:
        qs = qs.filter(kind=kind)
    if search:
        qs = prefix_search(qs, search)
    qs = filtered_list(qs, states=[state] if state else [], kinds=[kind] if kind else [])
    given = (("state", state), ("queue", queue), ("kind", kind))
    if not job_filters_indexed({k: [v] for k, v in given if v}, searched=bool(search)):
        windowed = newest_window(qs, order="-id")
        qs = qs if windowed is None else windowed
    rows = qs.order_by("-id").values_list(
        "id", "state", "attempt", "crash_attempt", "scheduled_at", "finalized_at"
    )[:limit]
    return tuple(rows)


def job_live_state(job_id: str, *, using: str = "default") -> dict[str, Any] | None:
    """What a job page keeps live: state, attempt number and last progress (one row by
    primary key); ``None`` once the job is gone."""
    row = (
        Job.objects.using(using)
        .filter(pk=job_id)
        .values("state", "attempt", "crash_attempt", "progress")
        .first()
    )
    if row is None:
        return None
    return {
        "state": row["state"],
        "attempt": row["attempt"] + row["crash_attempt"] + (row["state"] == "running"),
        "progress": row["progress"],
    }

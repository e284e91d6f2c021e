"""Read-only admin pages for every headgate model, and the console pages hung off them.

Nothing here adds, changes or deletes a row (see :mod:`headgate_django.console.readonly`
for why). User data (payloads, results, checkpoints, signal payloads) is shown only to
holders of ``headgate_django.view_job_payload`` (:mod:`headgate_django.visibility`): each
admin names its displays of it in ``private``.
The console pages (queues, workflows, live graphs, durable timelines) are mounted through
``JobAdmin`` and ``ExecutionAdmin`` so they work on whichever admin site registers them.
Durable and API models are registered in :mod:`headgate_django.console.admin_durable`,
schedules in :mod:`headgate_django.console.admin_schedules`.

Django imports this module in every process of a project with the admin installed, each
worker's included, so the store's readers for these pages are imported by the views that
use them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, SEARCH_VAR, ChangeList
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from headgate_django.console import (
    admin_durable,  # noqa: F401  (registers its admins)
    admin_schedules,  # noqa: F401  (registers its admins)
    admin_workers,  # noqa: F401  (registers its admins)
    joblist,
    links,
)
from headgate_django.console.attempts import attempts_timeline
from headgate_django.console.filters import KindFilter, QueueFilter
from headgate_django.console.jobpage import logs_html, progress_live
from headgate_django.console.readonly import (
    WHOLE_VAR,
    ReadOnlyAdmin,
    WindowedChangeList,
    job_link,
    pretty_bytes,
    pretty_json,
    workflow_link,
)
from headgate_django.kernel import sealed
from headgate_django.models import (
    Backpressure,
    ConcurrencyLimit,
    DutyLease,
    Effect,
    Fairness,
    Graft,
    Job,
    PartitionDeficit,
    Quarantine,
    QueueState,
    RateBucket,
    SignalEmission,
    UniqueWindow,
    WorkflowCheckpoint,
)

INDEX_TEMPLATE = "headgate_django/admin/index.html"


class JobChangeList(WindowedChangeList):
    """The job list, read through the state or kind index when it shows one state or one
    kind (see :mod:`headgate_django.store.index_hints`: MariaDB's own choice can read
    every row)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        from headgate_django.store.index_hints import filtered_list

        return filtered_list(
            super().get_queryset(request, exclude_parameters),
            states=request.GET.getlist("state__exact"),
            kinds=[*request.GET.getlist("kind"), *request.GET.getlist("kind__exact")],
        )


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    # Cells sized for a 1366 px screen (see console/joblist.py). Only the id sorts: every
    # other order would sort the filtered table, which no index serves.
    list_display = [
        "job_id",
        "kind_short",
        "queue",
        "state_badge",
        "attempts",
        "prio",
        "scheduled",
        "finished",
        "workflow_short",
    ]
    list_display_links = None
    sortable_by = ["job_id"]
    # Choices from the state enum and the registered tasks, not DISTINCT over the table;
    # newest first by primary key (ULIDs sort by creation), the only order an index serves
    # for every filter; no date hierarchy, which sorts every row.
    list_filter = ["state", ("queue", QueueFilter), ("kind", KindFilter)]
    # The queues page and the overview link one queue's jobs, of one state, held by one
    # worker (read through the claim, lease or (state, queue) indexes); ``kind__exact`` is
    # the live list's name for the kind filter (the kind index); the tutorial lists a
    # workflow's jobs by ``workflow_id`` (the workflow index).
    linked_filters = ("queue__exact", "kind__exact", "claimed_by__exact", "workflow_id")
    # Shows the search box; the search itself is get_search_results (prefixes of id and
    # kind, case-sensitive as they are, through an index on every database).
    search_fields = ["id__startswith", "kind__startswith"]
    ordering = ["-id"]
    change_list_template = "headgate_django/admin/job_change_list.html"
    change_form_template = "headgate_django/admin/job_change_form.html"
    readonly_fields = [
        "workflow",
        "admission_view",
        "error_timeline",
        "logs_view",
        "progress_view",
        "checkpoint_view",
        "result_view",
        "payload_view",
    ]
    private = ("checkpoint_view", "result_view", "payload_view")
    _fieldsets: list[tuple[str, list[Any]]] = [
        ("Job", ["id", "kind", "queue", "priority", "schema_version", "fingerprint", "workflow"]),
        ("Uniqueness", ["unique_key"]),
        (
            "Lifecycle",
            [
                "state",
                "attempt",
                "max_attempts",
                "crash_attempt",
                "enqueued_at",
                "scheduled_at",
                "deadline",
            ],
        ),
        ("Admission", ["partition_key", "rate_class", "weight", "admission_view"]),
        ("Finish", ["claimed_at", "finalized_at", "retention", "expires_at", "timeout"]),
        ("Lease", ["lease_id", "fence", "lease_expires_at", "claimed_by"]),
        ("Progress", ["progress_view"]),
        ("Attempts", ["error_timeline"]),
        ("Attempt logs", ["logs_view"]),
        ("Checkpoint and result", ["checkpoint_view", "result_view"]),
        ("Payload", ["payload_view"]),
    ]
    fieldsets = [(title, {"fields": fields}) for title, fields in _fieldsets]

    def __init__(self, model: Any, admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        # Link the console from the admin index of whichever site hosts it, unless the
        # project chose its own index template.
        if admin_site.index_template is None:
            admin_site.index_template = INDEX_TEMPLATE

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def indexed(self, filters: dict[str, list[str]], search: str) -> bool:
        """No index leads with the queue or the worker, and none is added for them: each
        one costs every enqueue, claim and ack (``store.index_hints.job_filters_indexed``)."""
        from headgate_django.store.index_hints import job_filters_indexed

        return job_filters_indexed(filters, searched=bool(search))

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        """The whole term as a prefix of the id or of the kind, as the API's ``?q=``, in a
        plan an index serves on every database (``store.index_hints.prefix_search``)."""
        from headgate_django.store.index_hints import prefix_search

        term = search_term.strip()
        return (prefix_search(queryset, term) if term else queryset), False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """The list, live on its first page in the default order (see JobListConsumer):
        a later page or another order would shift under the reader. Not a list read
        without its window: its socket would read the whole table every second."""
        context = dict(extra_context or {})
        params = request.GET
        first_page = params.get(PAGE_VAR, "1") in ("", "1") and not params.get(ORDER_VAR)
        if first_page and WHOLE_VAR not in params:
            kept = {k: params[k] for k in (*joblist.JOB_LIST_FILTERS, SEARCH_VAR) if params.get(k)}
            query = urlencode(kept)
            context["hg_live_ws"] = joblist.LIVE_PATH + (f"?{query}" if query else "")
            context["hg_site_name"] = self.site_name
        return super().changelist_view(request, context)

    def get_queryset(self, request: HttpRequest) -> Any:
        # A page of 100 jobs must not drag up to 100 payloads and results along; the
        # detail page loads the few it shows on access.
        heavy = (
            "payload",
            "cp_cursor",
            "result",
            "errors",
            "checkpoint",
            "progress",
            "logs",
            "output",
        )
        return super().get_queryset(request).defer(*heavy)

    @admin.display(description="admission now")
    def admission_view(self, obj: Job) -> str:
        """What holds a waiting job back (``admission.explain``), in words."""
        from headgate_django.admission import describe, explain
        from headgate_django.exceptions import NotFoundError

        try:
            return describe(explain(obj.pk))
        except NotFoundError:  # shown from a replica that lags behind its eviction
            return "—"

    @admin.display(description="payload")
    def payload_view(self, obj: Job) -> SafeString | str:
        payload = bytes(obj.payload)
        if sealed.is_sealed(payload):  # only a worker holds what opens it
            try:
                key_id = sealed.key_id_of(payload)
            except ValueError as exc:
                return f"encrypted, malformed: {exc}"
            return f"encrypted with key id {key_id!r} ({len(payload)} bytes)"
        return pretty_bytes(payload)

    @admin.display(description="checkpoint")
    def checkpoint_view(self, obj: Job) -> SafeString | str:
        return pretty_json(obj.checkpoint)

    @admin.display(description="result")
    def result_view(self, obj: Job) -> SafeString | str:
        return pretty_json(obj.result)

    @admin.display(description="progress")
    def progress_view(self, obj: Job) -> SafeString:
        """Live: redrawn over the page's socket as the handler reports progress."""
        from headgate_django.store.console import job_live_state

        return progress_live(obj.pk, job_live_state(obj.pk), self.admin_site.name)

    @admin.display(description="logged")
    def logs_view(self, obj: Job) -> SafeString | str:
        """What each attempt logged with ``ctx.log``, by level."""
        return logs_html(list(obj.logs or []))

    @admin.display(description="attempts")
    def error_timeline(self, obj: Job) -> SafeString | str:
        return attempts_timeline(obj)

    # -- the list's cells -----------------------------------------------------------
    @admin.display(description="job", ordering="id")
    def job_id(self, obj: Job) -> SafeString:
        return joblist.id_cell(obj.id, links.job_url_builder(self.site_name)(obj.id))

    @admin.display(description="kind")
    def kind_short(self, obj: Job) -> SafeString:
        return joblist.kind_cell(obj.kind)

    @admin.display(description="state")
    def state_badge(self, obj: Job) -> SafeString:
        return joblist.state_cell(obj.state)

    @admin.display(description="tries")
    def attempts(self, obj: Job) -> SafeString:
        return joblist.attempts_cell(obj.attempt, obj.crash_attempt)

    @admin.display(description="prio")
    def prio(self, obj: Job) -> int:
        return obj.priority

    @admin.display(description="scheduled")
    def scheduled(self, obj: Job) -> SafeString | str:
        return joblist.time_cell(obj.scheduled_at)

    @admin.display(description="finished")
    def finished(self, obj: Job) -> SafeString | str:
        return joblist.time_cell(obj.finalized_at)

    @admin.display(description="workflow")
    def workflow_short(self, obj: Job) -> Any:
        if not obj.workflow_id:
            return "—"
        return format_html(
            '<span class="hg-wf" title="{}">{}</span>',
            obj.workflow_id,
            workflow_link(obj.workflow_id, self.site_name, obj.id, joblist.short_id),
        )

    @admin.display(description="workflow")
    def workflow(self, obj: Job) -> Any:
        return workflow_link(obj.workflow_id, self.site_name, obj.id)

    def get_urls(self) -> list[Any]:
        # Imported here: the console views pull in the graph layout, CEL and snapshot
        # code, which every process that merely sets Django up (a worker) would load.
        from headgate_django.console.urls import job_console_urls

        return job_console_urls(self.admin_site) + super().get_urls()


@admin.register(Quarantine)
class QuarantineAdmin(ReadOnlyAdmin):
    list_display = ["fingerprint", "kind", "crash_count", "quarantined_at", "sample_job"]
    search_fields = ["=fingerprint", "^kind"]
    search_indexed = False
    readonly_fields = ["sample_job", "sample_payload_view"]
    private = ("sample_payload_view",)

    @admin.display(description="sample job")
    def sample_job(self, obj: Quarantine) -> Any:
        return job_link(obj.sample_job_id, self.site_name)

    @admin.display(description="sample payload")
    def sample_payload_view(self, obj: Quarantine) -> Any:
        return pretty_bytes(obj.sample_payload)


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ["name", "job", "fence", "created_at"]
    # A job's records in name order: the order of their unique key's index (the model's
    # own, by creation, sorts the table); no other sort has an index.
    ordering = ["job_id", "name"]
    sortable_by = ()
    search_fields = ["=job_id", "^name"]
    search_indexed = False
    readonly_fields = ["result_view"]
    private = ("result_view",)  # as the API's effects route shows it: to payload viewers

    @admin.display(description="job")
    def job(self, obj: Effect) -> Any:
        return job_link(obj.job_id, self.site_name)

    @admin.display(description="result")
    def result_view(self, obj: Effect) -> Any:
        return pretty_json(obj.result)


@admin.register(UniqueWindow)
class UniqueWindowAdmin(ReadOnlyAdmin):
    list_display = ["unique_key", "job", "expires_at"]
    sortable_by = ["unique_key"]  # the primary key; expires_at ties would sort the table
    search_fields = ["=unique_key", "=job_id"]
    search_indexed = False

    @admin.display(description="job")
    def job(self, obj: UniqueWindow) -> Any:
        return job_link(obj.job_id, self.site_name)


@admin.register(DutyLease)
class DutyLeaseAdmin(ReadOnlyAdmin):
    list_display = ["name", "holder", "lease_expires_at", "last_run_at"]
    readonly_fields = ["last_result_view"]
    exclude = ["last_result"]

    @admin.display(description="last result")
    def last_result_view(self, obj: DutyLease) -> Any:
        return pretty_json(obj.last_result)


@admin.register(QueueState)
class QueueStateAdmin(ReadOnlyAdmin):
    list_display = ["name", "paused", "admission", "weight", "dispatched", "updated_at"]


@admin.register(RateBucket)
class RateBucketAdmin(ReadOnlyAdmin):
    """Rate classes as stored; their tokens now are on the console's Admission page."""

    list_display = ["name", "limit_per_window", "window_ms", "burst", "paused", "updated_at"]


@admin.register(ConcurrencyLimit)
class ConcurrencyLimitAdmin(ReadOnlyAdmin):
    list_display = ["queue", "max_concurrent", "on_saturated", "updated_at"]


@admin.register(Backpressure)
class BackpressureAdmin(ReadOnlyAdmin):
    list_display = ["queue", "max_unfinished", "updated_at"]


@admin.register(Fairness)
class FairnessAdmin(ReadOnlyAdmin):
    """Fair queues; their partitions' waiting jobs are on the console's Admission page."""

    list_display = ["queue", "quantum", "credit_cap", "turn", "credit", "updated_at"]


@admin.register(PartitionDeficit)
class PartitionDeficitAdmin(ReadOnlyAdmin):
    list_display = ["queue", "partition_key", "deficit"]
    # Queue names compare byte by byte (a prefix is a range of the unique key, in the
    # list's order); without case, a search read every partition.
    search_fields = ["queue__startswith"]
    search_help_text = "A queue name or its start, with case."


@admin.register(WorkflowCheckpoint)
class WorkflowCheckpointAdmin(ReadOnlyAdmin):
    """One row per workflow that has ticked: the coordinator's durable memory."""

    list_display = [
        "graph",
        "coordinator",
        "revision",
        "generation",
        "outcome",
        "failed",
        "updated_at",
    ]
    list_filter = ["failed"]
    sortable_by = ["graph"]  # by workflow id, the primary key; nothing else has an index
    # With case, a range of the primary key; without case, a search read every checkpoint.
    search_fields = ["workflow_id__startswith"]
    search_help_text = "A workflow id or its start, with case."
    readonly_fields = ["graph", "coordinator", "history_table", "completed_view", "grafts_view"]
    exclude = ["history", "completed", "grafts"]

    @admin.display(description="workflow", ordering="workflow_id")
    def graph(self, obj: WorkflowCheckpoint) -> Any:
        return workflow_link(obj.workflow_id, self.site_name)

    @admin.display(description="coordinator job")
    def coordinator(self, obj: WorkflowCheckpoint) -> Any:
        return job_link(obj.coordinator_job_id, self.site_name)

    @admin.display(description="history (newest 256 events)")
    def history_table(self, obj: WorkflowCheckpoint) -> Any:
        if not obj.history:
            return "—"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.get("sequence"),
                    e.get("event"),
                    e.get("node", ""),
                    e.get("revision"),
                    e.get("at_ms", ""),
                )
                for e in obj.history
            ),
        )
        return format_html(
            '<table class="hg-history"><thead><tr><th>#</th><th>event</th><th>node</th>'
            "<th>revision</th><th>at (ms)</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="completion evidence (node → completed at, ms)")
    def completed_view(self, obj: WorkflowCheckpoint) -> Any:
        return pretty_json(obj.completed)

    @admin.display(description="accepted grafts")
    def grafts_view(self, obj: WorkflowCheckpoint) -> Any:
        return pretty_json(obj.grafts)


@admin.register(SignalEmission)
class SignalEmissionAdmin(ReadOnlyAdmin):
    """Signal history: the fact (payload), who sent it (source) and when (store clock)."""

    list_display = ["id", "graph", "signal", "idempotency_key", "emitted_at"]
    sortable_by = ["id"]  # the primary key: the other columns' sorts have no index
    search_fields = ["^workflow_id", "=idempotency_key"]
    search_indexed = False
    readonly_fields = ["graph", "payload_view", "source_view"]
    private = ("payload_view", "source_view")

    @admin.display(description="workflow", ordering="workflow_id")
    def graph(self, obj: SignalEmission) -> Any:
        return workflow_link(obj.workflow_id, self.site_name)

    @admin.display(description="payload")
    def payload_view(self, obj: SignalEmission) -> Any:
        return pretty_json(obj.payload)

    @admin.display(description="source")
    def source_view(self, obj: SignalEmission) -> Any:
        return pretty_json(obj.source)


@admin.register(Graft)
class GraftAdmin(ReadOnlyAdmin):
    """Graft requests and their receipts: what was asked and whether it was accepted."""

    list_display = ["receipt", "graph", "revision", "status", "decided_at"]
    ordering = ["-id"]
    sortable_by = ()  # newest first by primary key, the only order indexed
    # With case, each through its own index; without case, a search read every graft.
    search_fields = ["workflow_id__startswith", "receipt_job_id__exact"]
    search_help_text = "A workflow id or its start, or a receipt job id, with case."
    readonly_fields = ["graph", "receipt", "nodes_view"]
    exclude = ["nodes"]

    @admin.display(description="workflow", ordering="workflow_id")
    def graph(self, obj: Graft) -> Any:
        return workflow_link(obj.workflow_id, self.site_name)

    @admin.display(description="receipt job", ordering="receipt_job_id")
    def receipt(self, obj: Graft) -> Any:
        return job_link(obj.receipt_job_id, self.site_name)

    @admin.display(description="grafted nodes")
    def nodes_view(self, obj: Graft) -> Any:
        return pretty_json(obj.nodes)

"""Schema of the job queue. Rows are written only through :mod:`headgate_django.store`.

Field names follow Headgate's job model so people who know it (and outside checks) find
what they expect. Instants are store-clock values written by SQL, never by a worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core import checks
from django.core.validators import MinValueValidator
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q
from django.db.models.lookups import Exact, IsNull

from headgate_django.kernel.names import COORDINATOR_KIND
from headgate_django.kernel.states import EVICTABLE_STATES, LIVE_STATES, WAITING_STATES, State

# Warnings about partial indexes and constraints that our own migrations cover on MySQL.
_COVERED_ON_MYSQL = frozenset({"models.W036", "models.W037"})
STATE_CHOICES = [(s.value, s.value) for s in State if s is not State.DELETED]
#: The states almost every job passes through, which ``headgate_job_state_rare`` leaves out.
BULK_STATES = [State.AVAILABLE.value, State.COMPLETED.value, State.RUNNING.value]
#: The states in which a job holds its unique key, in the order every query spells them.
LIVE_JOB_STATES = sorted(s.value for s in LIVE_STATES)


def _default_retention() -> timedelta:
    return timedelta(days=7)


def _counter(help_text: str) -> models.IntegerField:
    return models.IntegerField(default=0, validators=[MinValueValidator(0)], help_text=help_text)


class BytewiseCharField(models.CharField):
    """A machine-made name (job id, kind, queue, fingerprint) that PostgreSQL compares byte
    by byte.

    PostgreSQL orders text in an index by the column's collation, and unless that is exactly
    "C" it asks the C library's ``strcoll`` for every comparison (``C.UTF-8`` and
    ``en_US.UTF-8`` alike): a few percent of the server's time in a drain, spent descending
    the primary key and the claim index. These names are compared for equality and ordered
    only to page through them, so byte order is the right order. Other databases compare
    them as they are (MySQL/MariaDB's collation is the project's choice), except the job
    id, binary and ``NO PAD`` there since migration 0035: a migration that alters it must
    keep that collation.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "postgresql" and params.get("collation") is None:
            params["collation"] = "C"
        return params


class Job(models.Model):
    """One unit of background work and its whole life: attempts, lease, result."""

    id = BytewiseCharField(primary_key=True, max_length=255)
    kind = BytewiseCharField(max_length=128)
    queue = BytewiseCharField(max_length=128, default="default")
    priority = models.IntegerField(default=0, help_text="Higher runs first within a queue.")
    schema_version = models.IntegerField(default=1, validators=[MinValueValidator(1)])
    payload = models.BinaryField(default=b"")
    fingerprint = BytewiseCharField(max_length=32)
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=State.AVAILABLE.value)
    # Plain integers with validators, not PositiveIntegerField: PostgreSQL rebuilds each of
    # its CHECK constraints for every statement that writes a job, which a one-row enqueue
    # pays on every call. Only the store writes these, and it never writes a negative value
    # (enqueue validates, the state machine only adds).
    attempt = _counter("Failed attempts so far.")
    crash_attempt = _counter("Lost leases so far.")
    max_attempts = models.IntegerField(default=25, validators=[MinValueValidator(1)])
    timeout = models.DurationField(null=True, blank=True, help_text="Per attempt.")
    scheduled_at = models.DateTimeField()
    lease_id = models.CharField(max_length=64, null=True, blank=True)
    fence = models.BigIntegerField(default=0, help_text="Bumped on every entry into running.")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=255, blank=True, default="")
    enqueued_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    retention = models.DurationField(default=_default_retention)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="finalized_at + retention: when eviction may delete it."
    )
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    errors = models.JSONField(default=list, blank=True, help_text="Newest 50 attempt errors.")
    checkpoint = models.JSONField(default=dict, blank=True)
    cp_cursor = models.BinaryField(null=True, blank=True, help_text="Position of the cursor step.")
    result = models.JSONField(null=True, blank=True)
    progress = models.JSONField(null=True, blank=True)
    workflow_id = models.CharField(max_length=255, null=True, blank=True)
    task_options = models.JSONField(
        null=True,
        blank=True,
        help_text="What a Django task's using() set that no other column keeps (run_after).",
    )
    # Set by enqueue_and_wait in the enqueue's transaction. On PostgreSQL a trigger notifies
    # the waiter when such a job finishes (migration 0021); other jobs' acks notify nobody.
    awaited = models.BooleanField(
        default=False, db_default=False, help_text="A caller waits for this job to finish."
    )
    output = models.BinaryField(
        null=True, blank=True, help_text="The handler's latest ctx.set_output()."
    )
    output_updated_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="Past it the job is archived (deadline_exceeded)."
    )
    # ctx.log lines, saved with the outcome of the attempt that logged them (newest 20
    # attempts; store/attempt_logs.py). Apart from ``errors`` so that the job detail and
    # every reader of failures stay light; read only by the logs route and the job page.
    logs = models.JSONField(
        null=True, blank=True, help_text="ctx.log entries of the newest attempts that logged."
    )
    # The enqueuing span's W3C headers, with OpenTelemetry installed (headgate_django.tracing).
    trace_context = models.JSONField(
        null=True, blank=True, help_text="W3C trace context of the enqueue (traceparent)."
    )
    # Admission control (headgate_django.admission): the tenant, for fairness and the
    # per-partition ceilings; the rate class whose tokens the job spends; its cost in them.
    # Database defaults too, so an insert that names none of them (a worker of the previous
    # release during a rolling deploy, a fill in SQL) still writes a valid row.
    partition_key = BytewiseCharField(max_length=128, blank=True, default="", db_default="")
    rate_class = BytewiseCharField(max_length=128, null=True, blank=True)
    weight = models.IntegerField(
        default=1,
        db_default=1,
        validators=[MinValueValidator(1)],
        help_text="Cost against its rate class.",
    )

    class Meta:
        db_table = "headgate_job"
        ordering = ["-enqueued_at"]
        permissions = [
            ("view_job_payload", "Can view job payloads"),
            ("operate", "Can operate jobs, queues and workflows"),
        ]
        constraints = [
            # A unique key is held by live jobs only, and most jobs have none: a partial
            # index that only those rows enter. MySQL/MariaDB have no partial indexes, so
            # Django skips this constraint there, and migrations 0009 and 0011 keep a stored
            # generated column that is the key while the job is live, under a plain unique
            # index (which admits any number of NULLs). See store/unique_keys.py.
            models.UniqueConstraint(
                fields=["unique_key"],
                condition=Q(unique_key__isnull=False, state__in=LIVE_JOB_STATES),
                name="headgate_job_unique_key_live",
            ),
            # Running exactly when leased. Written as one comparison of two truths rather than
            # (running and leased) or (not running and not leased): PostgreSQL reads a CHECK
            # constraint back from its stored text and compiles it for every statement that
            # writes a job, and the shorter tree halves what that costs a one-row insert.
            models.CheckConstraint(
                condition=Exact(
                    Exact(F("state"), State.RUNNING.value), IsNull(F("lease_id"), False)
                ),
                name="headgate_job_running_has_lease",
            ),
        ]
        # Partial indexes where the database has them (PostgreSQL, SQLite); migration
        # 0002 adds plain equivalents on MySQL/MariaDB, which has no partial indexes.
        indexes = [
            models.Index(
                fields=["queue", "-priority", "scheduled_at", "id"],
                condition=Q(state=State.AVAILABLE.value),
                name="headgate_job_claim",
            ),
            # Waiting jobs by tenant, for a fair queue's round-robin (store/fairness.py):
            # its partitions in key order, and each one's jobs in claim order.
            # MySQL/MariaDB index the generated column ``fair_queue`` (migration 0022).
            models.Index(
                fields=["queue", "partition_key", "-priority", "scheduled_at", "id"],
                condition=Q(state=State.AVAILABLE.value),
                name="headgate_job_fair",
            ),
            # A worker serving every queue (the default) orders across queues.
            models.Index(
                fields=["-priority", "scheduled_at", "id"],
                condition=Q(state=State.AVAILABLE.value),
                name="headgate_job_claim_all",
            ),
            models.Index(
                fields=["scheduled_at"],
                condition=Q(state__in=[State.SCHEDULED.value, State.RETRYABLE.value]),
                name="headgate_job_due",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(state=State.RUNNING.value),
                name="headgate_job_lease",
            ),
            # Finished jobs by state and expiry: eviction's range, and the count of one
            # state (completed above all) read from the index alone. Every finished job
            # takes this one entry, as it did when the index was on expires_at alone.
            models.Index(
                fields=["state", "expires_at"],
                condition=Q(state__in=sorted(s.value for s in EVICTABLE_STATES)),
                name="headgate_job_evict",
            ),
            # MySQL/MariaDB index the generated column ``fp_waiting`` instead (migration 0020).
            models.Index(
                fields=["fingerprint"],
                condition=Q(state__in=sorted(s.value for s in WAITING_STATES)),
                name="headgate_job_fp_waiting",
            ),
            # Jobs by state and queue, for the states a job passes through rarely or rests
            # in (the console's and the API's lists and counts of them). Partial: the bulk
            # of writes (insert as available, claim, complete) write no entry into it. The
            # claim indexes serve available jobs, the lease index running ones, the eviction
            # index finished ones. MySQL/MariaDB keep a plain (state, queue) index
            # (migration 0012).
            models.Index(
                fields=["state", "queue"],
                condition=~Q(state__in=BULK_STATES),
                name="headgate_job_state_rare",
            ),
            # The same rows newest first (ids are ULIDs): a list of archived, scheduled,
            # cancelled… jobs reads its page off this index instead of sorting every job
            # in that state. MySQL/MariaDB use a plain index on state, whose entries end
            # with the primary key (migration 0015).
            models.Index(
                fields=["state", "id"],
                condition=~Q(state__in=BULK_STATES),
                name="headgate_job_state_id",
            ),
            # A workflow's jobs by workflow id: equality, IN and the console's prefix filter
            # (pattern ops serve all three on PostgreSQL whatever the collation). Partial, so
            # plain jobs — most rows — write no entry into it.
            models.Index(
                fields=["workflow_id"],
                condition=Q(workflow_id__isnull=False),
                opclasses=["varchar_pattern_ops"],
                name="headgate_job_workflow",
            ),
            # Jobs of one kind, newest first, and the prefix search on kind (byte-ordered
            # on PostgreSQL, so LIKE 'x%' is a range of it whatever the collation).
            models.Index(fields=["kind", "id"], name="headgate_job_kind"),
            # Waiting jobs with a deadline, soonest first: the deadlines duty's range. Plain
            # jobs (no deadline) write no entry; MySQL/MariaDB get it without its condition.
            models.Index(
                fields=["deadline"],
                condition=Q(
                    deadline__isnull=False, state__in=sorted(s.value for s in WAITING_STATES)
                ),
                name="headgate_job_deadline",
            ),
            # The workflow lists: coordinators in workflow-id order, one row per workflow.
            models.Index(
                fields=["workflow_id"],
                condition=Q(kind=COORDINATOR_KIND),
                name="headgate_job_coordinators",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.state})"

    @classmethod
    def check(cls, **kwargs: Any) -> list[checks.CheckMessage]:
        """Django's checks, less its warnings about conditions MySQL/MariaDB cannot honour.

        There Django creates partial indexes without their conditions (models.W037) and
        skips conditional unique constraints (W036); migrations 0002 and 0009 add the plain
        indexes those databases need, so the warnings would only report a gap that is not
        there.
        """
        return [e for e in super().check(**kwargs) if e.id not in _COVERED_ON_MYSQL]


class Quarantine(models.Model):
    """A fingerprint (kind + payload) whose jobs crashed workers too often."""

    fingerprint = models.CharField(primary_key=True, max_length=32)
    kind = models.CharField(max_length=128)
    crash_count = models.PositiveIntegerField(default=0)
    quarantined_at = models.DateTimeField()
    sample_payload = models.BinaryField(default=b"")
    sample_job_id = models.CharField(max_length=255, blank=True, default="")
    reason = models.TextField(blank=True, default="")

    class Meta:
        db_table = "headgate_quarantine"
        ordering = ["-quarantined_at"]
        verbose_name_plural = "quarantine"
        # The console's list, newest first, and its window (store.windows): a crash loop
        # over many payloads quarantines a fingerprint per payload. Written only when one
        # reaches the crash limit, so the index costs no claim or ack.
        indexes = [models.Index(fields=["quarantined_at"], name="headgate_quarantine_at")]

    def __str__(self) -> str:
        return f"{self.kind} {self.fingerprint}"


class UniqueWindow(models.Model):
    """A throttled unique key (``Envelope.unique_window``): held until ``expires_at`` on the
    store clock, whatever becomes of the job, and released lazily by the next enqueue of
    the key (or the eviction duty's sweep). A row of its own, so that a job deleted at its
    ack (retention 0) still holds its key for the window."""

    unique_key = models.CharField(primary_key=True, max_length=255)
    job_id = models.CharField(max_length=255)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_unique_window"
        ordering = ["expires_at"]
        indexes = [models.Index(fields=["expires_at"], name="headgate_unique_window_exp")]

    def __str__(self) -> str:
        return self.unique_key


class Effect(models.Model):
    """An at-most-once effect of a job (``ctx.once(name, fn)``): committed in the same
    transaction as ``fn``'s own writes, under the attempt's lease, so no retry and no stale
    attempt runs it again; ``result`` is what ``fn`` returned, given back to a retry."""

    # Binary and NO PAD on MySQL/MariaDB (migrations 0031, 0035), as the job id is, so ids
    # and names differing only by case or trailing spaces are two effects there too; a
    # migration that alters these columns must keep that collation.
    job_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    result = models.JSONField(null=True, blank=True)
    fence = models.BigIntegerField(help_text="The fence of the attempt that ran it.")
    created_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_effect"
        ordering = ["job_id", "created_at"]
        # Also how a job's records are deleted with it (store.effect_records).
        constraints = [
            models.UniqueConstraint(fields=["job_id", "name"], name="headgate_effect_key")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name}"


class DutyLease(models.Model):
    """Who runs a singleton maintenance duty right now (promote, reclaim, evict, …)."""

    name = models.CharField(primary_key=True, max_length=64)
    holder = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fence = models.BigIntegerField(default=0)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_result = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "headgate_duty"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueState(models.Model):
    """Operator switches per queue. A paused queue is skipped by every claim.

    ``admission`` marks a queue that an admission policy governs: the plain claim skips it
    as it skips a paused one, and the admitted claim (``store/admitted.py``) serves it
    under that row's lock, which is what makes its ceilings exact.
    """

    name = models.CharField(primary_key=True, max_length=128)
    paused = models.BooleanField(default=False)
    admission = models.BooleanField(
        default=False, help_text="An admission policy governs the queue's claims."
    )
    # Weighted-fair selection between queues (kernel/fairness.py): the queue's weight (None:
    # none set) and the ledger of jobs claims took from it while weights applied.
    weight = models.IntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    dispatched = models.BigIntegerField(
        default=0, db_default=0, help_text="Jobs claimed under the weighted ledger."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "headgate_queue_state"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


ON_SATURATED_CHOICES = [(c, c) for c in ("queue", "discard", "cancel_incoming", "cancel_running")]


class RateBucket(models.Model):
    """A rate class: ``limit_per_window`` tokens per ``window_ms``, at most ``burst`` saved
    up, refilled lazily by the claims that spend them (store clock, ``refilled_at_ms``)."""

    name = models.CharField(primary_key=True, max_length=128)
    limit_per_window = models.IntegerField(validators=[MinValueValidator(1)])
    window_ms = models.BigIntegerField(validators=[MinValueValidator(1)])
    burst = models.IntegerField(validators=[MinValueValidator(1)])
    paused = models.BooleanField(default=False)
    tokens = models.FloatField(help_text="As of refilled_at_ms; below zero is a debt.")
    refilled_at_ms = models.BigIntegerField(help_text="Store-clock epoch milliseconds.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "headgate_rate_bucket"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.limit_per_window} per {self.window_ms} ms"


class Backpressure(models.Model):
    """At most ``max_unfinished`` unfinished jobs (pending, scheduled, available, running,
    retryable) in ``queue``; an enqueue that would pass it is refused. 0 closes intake."""

    queue = models.CharField(primary_key=True, max_length=128)
    max_unfinished = models.IntegerField(validators=[MinValueValidator(0)])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "headgate_backpressure"
        ordering = ["queue"]

    def __str__(self) -> str:
        return f"{self.queue}: at most {self.max_unfinished} unfinished"


class ConcurrencyLimit(models.Model):
    """At most ``max_concurrent`` running jobs per partition of ``queue``, and what a
    claim does with a job whose partition is full (``on_saturated``)."""

    queue = models.CharField(primary_key=True, max_length=128)
    max_concurrent = models.IntegerField(validators=[MinValueValidator(1)])
    on_saturated = models.CharField(max_length=16, choices=ON_SATURATED_CHOICES, default="queue")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "headgate_concurrency_limit"
        ordering = ["queue"]

    def __str__(self) -> str:
        return f"{self.queue}: {self.max_concurrent} per partition"


class Fairness(models.Model):
    """Deficit round-robin between the partitions of ``queue`` (kernel/fairness.py): its
    quantum and credit cap, and where the rotation stands (``turn`` is the partition in
    the middle of its visit, ``credit`` what that visit has left)."""

    queue = models.CharField(primary_key=True, max_length=128)
    quantum = models.IntegerField(default=10, validators=[MinValueValidator(1)])
    credit_cap = models.IntegerField(default=40, validators=[MinValueValidator(0)])
    turn = BytewiseCharField(max_length=128, null=True, blank=True)
    credit = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "headgate_fairness"
        ordering = ["queue"]
        verbose_name_plural = "fairness"

    def __str__(self) -> str:
        return f"{self.queue}: quantum {self.quantum}"


class PartitionDeficit(models.Model):
    """Credit a partition of a fair queue carries to its next visit (absent: none)."""

    queue = BytewiseCharField(max_length=128)
    partition_key = BytewiseCharField(max_length=128)
    deficit = models.IntegerField(validators=[MinValueValidator(1)])

    class Meta:
        db_table = "headgate_partition_deficit"
        ordering = ["queue", "partition_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "partition_key"], name="headgate_deficit_partition"
            )
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.partition_key}: {self.deficit}"


class WorkflowCheckpoint(models.Model):
    """A workflow's durable memory: revision, generation, completion evidence, history.

    Written only by the workflow's coordinator under its job lease (fenced), so a stale
    coordinator attempt can never overwrite a newer one's evidence.
    """

    workflow_id = models.CharField(primary_key=True, max_length=255)
    coordinator_job_id = models.CharField(max_length=255)
    revision = models.PositiveIntegerField(default=1)
    generation = models.PositiveIntegerField(default=1)
    completed = models.JSONField(default=dict, blank=True, help_text="node → completed_at_ms")
    failed = models.BooleanField(default=False)
    started = models.BooleanField(default=False)
    outcome = models.CharField(max_length=16, default="waiting")
    history = models.JSONField(default=list, blank=True, help_text="Newest 256 events.")
    next_sequence = models.BigIntegerField(default=1)
    grafts = models.JSONField(default=list, blank=True, help_text="Accepted grafted nodes.")
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "headgate_workflow_checkpoint"
        ordering = ["workflow_id"]
        indexes = [
            # The workflows-prune duty reads the lapsed checkpoints oldest first.
            models.Index(fields=["updated_at"], name="headgate_wf_cp_updated"),
            # The console's failed workflows, in workflow-id order: without it a list of the
            # few failed ones reads every checkpoint. One row per workflow, written once a
            # tick, so unlike the job table this one can afford it. Plain, not partial on
            # ``failed``: MySQL/MariaDB would drop the condition and keep a copy of the key.
            models.Index(fields=["failed", "workflow_id"], name="headgate_wf_cp_failed"),
        ]

    def __str__(self) -> str:
        return self.workflow_id


class SignalEmission(models.Model):
    """One emitted workflow signal: the fact (payload), who sent it (source), when (store).

    The idempotency key is unique per workflow while the record is kept (the newest 100
    per workflow), which is the idempotency horizon.
    """

    workflow_id = models.CharField(max_length=255)
    signal = models.CharField(max_length=128)
    idempotency_key = models.CharField(max_length=255)
    payload = models.JSONField(null=True, blank=True)
    source = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64)
    emitted_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_signal_emission"
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_id", "idempotency_key"], name="headgate_signal_key"
            )
        ]
        indexes = [
            models.Index(fields=["workflow_id", "-id"], name="headgate_signal_wf"),
            # The workflows-prune duty reads the lapsed emissions oldest first.
            models.Index(fields=["emitted_at"], name="headgate_signal_emitted"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id} {self.signal} ({self.idempotency_key})"


class Graft(models.Model):
    """An audit record of a graft request: what was asked and whether it was accepted."""

    workflow_id = models.CharField(max_length=255, db_index=True)
    revision = models.PositiveIntegerField(help_text="The revision the graft creates.")
    receipt_job_id = models.CharField(max_length=255, unique=True)
    nodes = models.JSONField(default=list)
    status = models.CharField(max_length=16, default="accepted")
    reason = models.TextField(blank=True, default="")
    decided_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_graft"
        ordering = ["workflow_id", "revision"]
        # The workflows-prune duty reads the lapsed records oldest first.
        indexes = [models.Index(fields=["decided_at"], name="headgate_graft_decided")]

    def __str__(self) -> str:
        return self.receipt_job_id


# -- durable (workflow-as-code) ---------------------------------------------------------

#: Execution states; ``running`` and ``suspended`` are live and hold a business key.
DURABLE_STATES = ["running", "suspended", "succeeded", "failed", "cancelled"]
DURABLE_LIVE = ["running", "suspended"]


class Execution(models.Model):
    """The header of one durable workflow execution: what runs, its state and outcome.

    The header is the source of truth for the state; ``last_seq`` is the seq of the newest
    history event, so an append is a compare-and-set on it (two replay passes of one
    execution can never both append). Instants are store-clock values.
    """

    id = models.CharField(primary_key=True, max_length=200)
    name = models.CharField(max_length=128)
    version = models.CharField(max_length=64)
    state = models.CharField(
        max_length=16, choices=[(s, s) for s in DURABLE_STATES], default="running"
    )
    input = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    failure_reason = models.TextField(blank=True, default="")
    suspended_reason = models.TextField(blank=True, default="")
    business_idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    live_key = models.GeneratedField(
        expression=models.Case(
            models.When(state__in=DURABLE_LIVE, then=models.F("business_idempotency_key")),
            default=models.Value(None),
            output_field=models.CharField(max_length=255, null=True),
        ),
        output_field=models.CharField(max_length=255, null=True),
        db_persist=True,
    )
    task_queue = models.CharField(max_length=128, default="default")
    meta = models.JSONField(default=dict, blank=True)
    parent_id = models.CharField(
        max_length=200, null=True, blank=True, help_text="The execution that started this child."
    )
    parent_command_id = models.CharField(
        max_length=64, blank=True, default="", help_text="The parent's child:N command."
    )
    parent_close_policy = models.CharField(
        max_length=16, blank=True, default="", help_text="terminate, abandon or request_cancel."
    )
    last_seq = models.BigIntegerField(default=0, help_text="Seq of the newest history event.")
    next_timer_at = models.DateTimeField(
        null=True, blank=True, help_text="When its earliest unfired timer is due."
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Runs (continue-as-new). Database defaults, so every writer's INSERT gets the first run.
    run_id = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="Id of the current run; empty for the first run, whose id is the execution's.",
    )
    run_number = models.PositiveIntegerField(
        default=1, db_default=1, help_text="1 for the first run, one more per continue-as-new."
    )
    history_bytes = models.BigIntegerField(
        default=0, db_default=0, help_text="JSON size of the current run's event payloads."
    )
    history_warning = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="Set once per run when its history passes the size thresholds.",
    )
    waiting_on = models.JSONField(
        null=True,
        blank=True,
        help_text='What the last pass parked on: {"select": id or null, "futures": [ids]}.',
    )

    class Meta:
        db_table = "headgate_durable_execution"
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["name", "live_key"], name="headgate_durable_live_key"),
        ]
        indexes = [
            # The admin's list, newest first.
            models.Index(fields=["created_at", "id"], name="headgate_durable_created"),
            models.Index(fields=["state", "updated_at"], name="headgate_durable_state"),
            models.Index(fields=["state", "finished_at"], name="headgate_durable_finished"),
            # A parent's children, for its view and for its close policy.
            models.Index(fields=["parent_id", "created_at"], name="headgate_durable_parent"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.version} {self.id} ({self.state})"


class HistoryEvent(models.Model):
    """One append-only history record of an execution; seqs are contiguous from 1.

    ``fact_key`` holds the execution key of an Operation's result event, so each
    Operation gets at most one OperationCompleted/OperationFailed.
    """

    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="history", db_index=False
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=32)
    payload = models.JSONField(default=dict)
    at = models.DateTimeField()
    fact_key = models.CharField(max_length=255, null=True, blank=True)

    class Meta:
        db_table = "headgate_durable_history"
        ordering = ["execution_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "seq"], name="headgate_durable_seq"),
            models.UniqueConstraint(fields=["execution", "fact_key"], name="headgate_durable_fact"),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}#{self.seq} {self.type}"


class ExecutionRun(models.Model):
    """A finished run of an execution that continued as new; its history is archived in
    :class:`RunHistoryEvent` so the current run's history starts afresh at seq 1."""

    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    number = models.PositiveIntegerField()
    run_id = models.CharField(max_length=200)
    input = models.JSONField(null=True, blank=True)
    events = models.BigIntegerField(help_text="Events in its history.")
    history_bytes = models.BigIntegerField(default=0)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_durable_run"
        ordering = ["execution_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "number"], name="headgate_durable_run_n"),
            models.UniqueConstraint(fields=["execution", "run_id"], name="headgate_durable_run_id"),
        ]
        # durable-vacuum prunes ended runs oldest first (store.durable_runs.runs_prune).
        indexes = [models.Index(fields=["finished_at"], name="headgate_durable_run_done")]

    def __str__(self) -> str:
        return f"{self.execution_id} run {self.number} ({self.run_id})"


class RunHistoryEvent(models.Model):
    """One history record of a finished run, as it was when the run ended."""

    run = models.ForeignKey(
        ExecutionRun, on_delete=models.CASCADE, related_name="history", db_index=False
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=32)
    payload = models.JSONField(default=dict)
    at = models.DateTimeField()

    class Meta:
        db_table = "headgate_durable_run_history"
        ordering = ["run_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="headgate_durable_run_seq"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id}#{self.seq} {self.type}"


class SignalInbox(models.Model):
    """A delivered signal; a repeated ``message_id`` for the same name is a duplicate."""

    workflow = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="signals", db_index=False
    )
    name = models.CharField(max_length=128)
    message_id = models.CharField(max_length=255, null=True, blank=True)
    payload = models.JSONField(null=True, blank=True)
    seq = models.BigIntegerField(help_text="Seq of its SignalReceived history event.")
    received_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_durable_signal"
        ordering = ["workflow_id", "seq"]
        verbose_name_plural = "signal inboxes"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "name", "message_id"], name="headgate_durable_signal_msg"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id} {self.name} ({self.message_id or '-'})"


class IdempotencyRecord(models.Model):
    """The response to one API mutation, kept so a retried request replays it byte for byte.

    Keyed by a digest of (user, Idempotency-Key) rather than the raw key, so the unique
    index is short and immune to case-insensitive collations (MariaDB). The request's
    method, path and body hash are kept to tell a true replay from a reused key (409).
    Rows live until ``expires_at`` (``HEADGATE['IDEMPOTENCY_TTL']``); an expired row is
    ignored by lookups and deleted by the ``idempotency-purge`` duty.
    """

    key_digest = models.CharField(max_length=64, unique=True, help_text="sha256(user, key)")
    key = models.CharField(max_length=255)
    user = models.CharField(max_length=255, help_text="Primary key of the requesting user.")
    method = models.CharField(max_length=10)
    path = models.TextField()
    body_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(default=0)
    response_headers = models.JSONField(default=dict, blank=True)
    response_body = models.BinaryField(default=b"")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "headgate_idempotency"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.method} {self.path} ({self.key})"


# -- periodic schedules -----------------------------------------------------------------

ON_MISSED_CHOICES = [(s, s) for s in ("skip", "run_once", "backfill")]
SCHEDULE_OUTCOMES = ["enqueued", "deduplicated", "failed", "skipped", "parked"]


class Schedule(models.Model):
    """A periodic schedule: what to start (``target``) on every tick of ``spec``.

    ``next_run_at`` is the first tick not yet handled; the scheduler advances it with a
    compare-and-set in the transaction that enqueues the tick, so a tick is handled once
    however many schedulers reach it. A schedule whose ticks cannot be computed is
    *parked*: ``next_run_at`` null and ``plan_error`` saying why, until an edit or a
    resume plans it again. Instants are store-clock values.
    """

    name = models.CharField(max_length=128, unique=True)
    target = models.JSONField(help_text="What each tick starts: a task, workflow or durable.")
    spec = models.CharField(max_length=255)
    timezone = models.CharField(max_length=64, default="UTC")
    on_missed = models.CharField(max_length=16, choices=ON_MISSED_CHOICES, default="skip")
    backfill_limit = models.IntegerField(default=10, validators=[MinValueValidator(0)])
    paused = models.BooleanField(default=False)
    declared = models.BooleanField(
        default=False, help_text="Declared in HEADGATE['SCHEDULES'] (synced by workers)."
    )
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_enqueued_at = models.DateTimeField(null=True, blank=True)
    plan_error = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="Why the scheduler parked it (its ticks cannot be computed); empty if not.",
    )
    revision = models.PositiveBigIntegerField(
        default=0,
        help_text="How many times an edit paused it, resumed it or changed its spec, zone, "
        "target or next run: a scheduler pass that read another count lost its ticks to "
        "an edit, even one undone before its commit.",
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_schedule"
        ordering = ["name"]
        indexes = [models.Index(fields=["paused", "next_run_at"], name="headgate_schedule_due")]

    def __str__(self) -> str:
        return self.name


class ScheduleEvent(models.Model):
    """What one tick of a schedule became. Keyed by the schedule's name, not a foreign
    key, so the audit outlives the schedule; the newest 100 per schedule are kept."""

    schedule_name = models.CharField(max_length=128)
    tick_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=[(o, o) for o in SCHEDULE_OUTCOMES])
    reason = models.CharField(max_length=64, blank=True, default="")
    target_id = models.CharField(max_length=255, blank=True, default="")
    recorded_at = models.DateTimeField()

    class Meta:
        db_table = "headgate_schedule_event"
        ordering = ["-id"]
        indexes = [models.Index(fields=["schedule_name", "-id"], name="headgate_schedule_ev")]

    def __str__(self) -> str:
        return f"{self.schedule_name} {self.tick_at:%Y-%m-%dT%H:%M:%SZ} {self.outcome}"


class Worker(models.Model):
    """One ``runworkers`` process, as its last heartbeat described it (the registry).

    The worker upserts its row every ``HEADGATE["WORKER_HEARTBEAT"]`` in one statement and
    marks it stopped on a clean exit; a row whose heartbeat is older than
    :data:`headgate_django.kernel.workers.GONE_AFTER_BEATS` intervals is a worker that
    died without saying so. The maintenance duty deletes rows older than
    ``WORKER_RETENTION``. Instants are the store's clock.
    """

    id = models.CharField(primary_key=True, max_length=255)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(null=True, blank=True, help_text="None: every queue.")
    concurrency = models.IntegerField()
    in_flight = models.IntegerField(default=0, help_text="Jobs held: running or buffered.")
    in_flight_by_queue = models.JSONField(default=dict, blank=True)
    claimed = models.BigIntegerField(default=0)
    completed = models.BigIntegerField(default=0)
    retried = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    heartbeat_ms = models.IntegerField(help_text="The interval the worker beats at.")
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "headgate_worker"
        ordering = ["id"]
        indexes = [models.Index(fields=["last_heartbeat_at"], name="headgate_worker_beat")]

    def __str__(self) -> str:
        return self.id


class QueueMinute(models.Model):
    """Outcomes per queue and minute of the store clock, the dashboard's per-minute series.

    Workers add what they recorded since their last flush (one upsert a second at most,
    off the claim and ack paths), so the chart never counts rows of ``headgate_job``.
    ``minute`` is whole minutes since the Unix epoch. Rows older than a day are deleted by
    the maintenance duty.
    """

    queue = models.CharField(max_length=128)
    minute = models.BigIntegerField()
    completed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    retried = models.BigIntegerField(default=0)

    class Meta:
        db_table = "headgate_queue_minute"
        ordering = ["-minute", "queue"]
        constraints = [
            models.UniqueConstraint(fields=["minute", "queue"], name="headgate_queue_minute_key")
        ]

    def __str__(self) -> str:
        return f"{self.queue} @{self.minute}"

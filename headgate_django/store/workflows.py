"""Store verbs of the workflow layer: node reads, the fenced tick write, wake-ups.

Node reads are set-based and bounded (chunks of job ids, never a queue scan). The tick
write locks the coordinator's job row under its lease first, so a stale coordinator
attempt cannot write evidence or move a node; the checkpoint is saved before any node
is promoted, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from headgate_django.envelope import decode_call
from headgate_django.kernel.names import CHILD_KIND, COORDINATOR_KIND
from headgate_django.kernel.names import GRAFT_KIND as GRAFT_KIND  # re-exported: the workflow
from headgate_django.kernel.names import RETRY_KIND as RETRY_KIND  # layer imports them here
from headgate_django.kernel.states import State
from headgate_django.kernel.workflow import MISSING, Checkpoint, NodeRow, Plan
from headgate_django.models import Job, WorkflowCheckpoint
from headgate_django.store import vendor as v
from headgate_django.store.effect_records import effects_delete_gone
from headgate_django.store.fenced import LeaseRef, append_error, error_entry, lock_held
from headgate_django.store.rows import prep

_CHUNK = 500


#: The coordinator option listing the link jobs (in parent workflows) that wait for it.
WAITERS = "waiters"


def coordinator_job_id(workflow_id: str) -> str:
    return f"{workflow_id}:coordinator"


def to_ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_ms(value: int) -> datetime:
    """Exact: dividing by 1000 in floating point is off by up to a millisecond's
    fraction for distant instants (9999-12-31T23:59:59.999 became …59.998993)."""
    return _EPOCH + timedelta(milliseconds=value)


def workflow_nodes_read(
    job_ids: Mapping[str, str], *, using: str = "default"
) -> dict[str, NodeRow]:
    """``{node: job_id}`` → ``{node: NodeRow}``; absent rows are ``missing``."""
    by_job = {job_id: name for name, job_id in job_ids.items()}
    rows: dict[str, NodeRow] = {}
    ids = list(by_job)
    conn = v.connection_for(using)
    instant = _instant_parser(conn)
    # Plain SQL: the ORM's per-parameter preparation of a 500-id IN list cost more than
    # the query itself, on every tick of a large workflow.
    with conn.cursor() as cursor:
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            cursor.execute(
                f"SELECT id, state, finalized_at FROM headgate_job WHERE id IN ({_in(chunk)})",
                chunk,
            )
            for job_id, state, finalized_at in cursor.fetchall():
                # Only a completion's instant is evidence; the others need no conversion.
                at = (
                    to_ms(instant(finalized_at))
                    if state == State.COMPLETED.value and finalized_at is not None
                    else None
                )
                rows[by_job[job_id]] = NodeRow(state, at)
    for name in job_ids:
        rows.setdefault(name, NodeRow(MISSING))
    return rows


def _instant_parser(conn: Any) -> Callable[[Any], datetime]:
    """A raw DATETIME column value → aware UTC datetime, with the backend's converters
    looked up once rather than per row."""
    from django.db.models import DateTimeField

    expression = v._Expr(DateTimeField())
    converters = conn.ops.get_db_converters(expression)

    def parse(value: Any) -> datetime:
        for converter in converters:
            value = converter(value, expression, conn)
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    return parse


def workflow_checkpoint_load(
    workflow_id: str, *, forget_earlier: bool = False, using: str = "default"
) -> WorkflowCheckpoint | None:
    """The workflow's checkpoint; None when it has none, or when the one stored was last
    written before the workflow's coordinator job was enqueued: that one is an earlier
    workflow's of the same id (:mod:`.workflow_records`), whose records ``forget_earlier``
    also deletes (the coordinator's tick asks, before it writes its own)."""
    from django.db.models import OuterRef, Subquery

    from headgate_django.store.workflow_records import is_earlier, workflow_forget_earlier

    coordinator = Job.objects.using(using).filter(pk=OuterRef("coordinator_job_id"))
    row = (
        WorkflowCheckpoint.objects.using(using)
        .filter(pk=workflow_id)
        .annotate(coordinator_enqueued_at=Subquery(coordinator.values("enqueued_at")[:1]))
        .first()
    )
    if row is None or not is_earlier(row.updated_at, row.coordinator_enqueued_at):
        return row
    if forget_earlier:
        workflow_forget_earlier(workflow_id, using=using)
    return None


def checkpoint_from_row(row: WorkflowCheckpoint | None) -> Checkpoint:
    if row is None:
        return Checkpoint()
    return Checkpoint(
        revision=row.revision,
        generation=row.generation,
        completed=dict(row.completed),
        failed=row.failed,
        started=row.started,
        history=list(row.history),
        next_sequence=row.next_sequence,
    )


def workflow_tick_save(
    ref: LeaseRef,
    *,
    workflow_id: str,
    checkpoint: Checkpoint,
    plan: Plan,
    outcome: str | None = None,
    graft_receipt: str | None = None,
    using: str = "default",
) -> bool:
    """Save the checkpoint, then apply the plan's mutations: one fenced transaction.

    A plan that ends the workflow is not saved (``False``) while ``graft_receipt`` is
    waiting: it was submitted after the tick read the nodes, under the coordinator row's
    lock this takes too, and must be decided before the workflow may finish (a finished
    workflow would leave it pending for ever).
    """
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        lock_held(cursor, conn, ref, "id")  # LeaseLostError if the coordinator moved on
        final = (outcome or plan.outcome.value) != "waiting"
        if final and graft_receipt is not None and _is_pending(cursor, graft_receipt, GRAFT_KIND):
            return False
        _save_checkpoint(
            cursor, conn, ref.job_id, workflow_id, checkpoint, outcome or plan.outcome.value, None
        )
        _delete(cursor, conn, plan.delete)
        _promote(cursor, conn, plan.promote)
        _schedule(cursor, conn, plan.schedule)
        _fail_pending(cursor, conn, plan.fail)
    return True


def _is_pending(cursor: Any, job_id: str, kind: str) -> bool:
    cursor.execute(
        "SELECT 1 FROM headgate_job WHERE id = %s AND state = %s AND kind = %s",
        [job_id, State.PENDING.value, kind],
    )
    return cursor.fetchone() is not None


def _save_checkpoint(
    cursor: Any,
    conn: Any,
    coordinator_id: str,
    workflow_id: str,
    cp: Checkpoint,
    outcome: str,
    grafts: list[dict[str, Any]] | None,
) -> None:
    values = {
        "coordinator_job_id": coordinator_id,
        "revision": cp.revision,
        "generation": cp.generation,
        "completed": cp.completed,
        "failed": cp.failed,
        "started": cp.started,
        "outcome": outcome,
        "history": cp.history,
        "next_sequence": cp.next_sequence,
    }
    if grafts is not None:
        values["grafts"] = grafts
    fields = WorkflowCheckpoint._meta
    params = [
        fields.get_field(k).get_db_prep_save(val, connection=conn)  # type: ignore[union-attr]
        for k, val in values.items()
    ]
    assignments = ", ".join(f"{conn.ops.quote_name(k)} = %s" for k in values)
    cursor.execute(
        f"UPDATE headgate_workflow_checkpoint SET {assignments}, updated_at = {v.now(conn)} "
        "WHERE workflow_id = %s",
        [*params, workflow_id],
    )
    if cursor.rowcount == 0:
        if "grafts" not in values:
            values["grafts"] = []
            params.append(fields.get_field("grafts").get_db_prep_save([], connection=conn))
        columns = ", ".join(map(conn.ops.quote_name, ["workflow_id", *values, "updated_at"]))
        cursor.execute(
            f"INSERT INTO headgate_workflow_checkpoint ({columns}) "
            f"VALUES (%s, {v.placeholders(len(values))}, {v.now(conn)})",
            [workflow_id, *params],
        )


def _in(ids: list[str]) -> str:
    return v.placeholders(len(ids))


def _delete(cursor: Any, conn: Any, job_ids: list[str]) -> None:
    """Doomed descendants that never ran go away (the failure is explained by history),
    with the effect records of those that ran before (a retryable one)."""
    if job_ids:
        states = [
            s.value for s in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE)
        ]
        cursor.execute(
            f"{v.delete_jobs_by_id(conn)} WHERE id IN ({_in(job_ids)}) "
            f"AND state IN ({_in(states)})",
            [*job_ids, *states],
        )
        effects_delete_gone(cursor, job_ids)


def _promote(cursor: Any, conn: Any, job_ids: list[str]) -> None:
    if job_ids:
        cursor.execute(
            f"UPDATE {v.jobs_by_id(conn)} SET state = %s, scheduled_at = {v.now(conn)} "
            f"WHERE id IN ({_in(job_ids)}) AND state = %s",
            [State.AVAILABLE.value, *job_ids, State.PENDING.value],
        )


def _schedule(cursor: Any, conn: Any, items: list[tuple[str, int]]) -> None:
    """Pending relative timers → scheduled at their store-anchored instant."""
    for job_id, at_ms in items:
        at = prep(conn, "scheduled_at", from_ms(at_ms))
        cursor.execute(
            f"UPDATE headgate_job SET state = CASE WHEN %s <= {v.now(conn)} THEN %s ELSE %s END, "
            "scheduled_at = %s WHERE id = %s AND state = %s",
            [at, State.AVAILABLE.value, State.SCHEDULED.value, at, job_id, State.PENDING.value],
        )


def _fail_pending(cursor: Any, conn: Any, items: list[tuple[str, str]]) -> None:
    """A node that cannot be decided (a failing condition) is cancelled with the reason.

    Only while it is still pending: the plan was made from a read outside this
    transaction, and an operator may have promoted the node since (and a worker claimed
    it). The read locks the row, so a promote still uncommitted is waited for and then
    seen; the update repeats the condition all the same. Cancelling a node that has moved
    on would undo the promote, or (running) break ``headgate_job_running_has_lease`` and
    fail the whole tick.
    """
    pending = State.PENDING.value
    for job_id, reason in items:
        cursor.execute(
            f"SELECT errors, attempt, {v.now(conn)} FROM headgate_job "
            f"WHERE id = %s AND state = %s{v.for_update(conn)}",
            [job_id, pending],
        )
        row = cursor.fetchone()
        if row is None:
            continue
        errors = append_error(row[0], error_entry(conn, row[2], row[1], "condition", reason, None))
        cursor.execute(
            f"UPDATE headgate_job SET state = %s, errors = %s, finalized_at = {v.now(conn)}, "
            f"expires_at = {v.plus_duration_column(conn, 'retention')} WHERE id = %s AND state = %s",
            [State.CANCELLED.value, prep(conn, "errors", errors), job_id, pending],
        )


def wake_on_finish(cursor: Any, conn: Any, workflow_ids: set[str], job_ids: set[str]) -> None:
    """``ON_FINISH`` (registered by :mod:`headgate_django.workflows.handlers`): a child
    finished: make its snoozing coordinator available now; a coordinator finished:
    likewise the parents' links that wait for its workflow (see ``_waiting_links``).
    """
    from headgate_django.conf import headgate_settings

    if not headgate_settings.WORKFLOW_EVENT_WAKE:
        return
    ids = {coordinator_job_id(w) for w in workflow_ids}
    _wake(cursor, conn, sorted(ids | _waiting_links(cursor, ids & job_ids)))


def _waiting_links(cursor: Any, coordinators: set[str]) -> set[str]:
    """The link jobs waiting for the workflows of these just-finished coordinators.

    A bundle writes them into each child's coordinator options (``waiters``), so a child
    workflow's end wakes its parents in the same commit instead of at their next poll. A
    payload that does not decode (replaced by hand) wakes nobody: the links still poll.
    """
    if not coordinators:
        return set()
    ids = sorted(coordinators)
    cursor.execute(f"SELECT payload FROM headgate_job WHERE id IN ({_in(ids)})", ids)
    links: set[str] = set()
    for (payload,) in cursor.fetchall():
        try:
            options = decode_call(bytes(payload))[1].get("options") or {}
            links.update(str(link) for link in options.get(WAITERS, ()))
        except (ValueError, TypeError, AttributeError):
            continue
    return links


def _wake(cursor: Any, conn: Any, ids: list[str]) -> None:
    """Make these jobs available now if they are scheduled (snoozing).

    A job that is running right now gets ``scheduled_at`` moved past its ``claimed_at``,
    which its snooze honours (see ``job_snooze``): no wake-up is lost. The extra
    millisecond (for a running job only) keeps "past" strict on SQLite, whose clock has
    millisecond resolution, when the wake lands in the claim's millisecond.
    """
    cursor.execute(
        f"UPDATE {v.jobs_by_id(conn)} "
        "SET state = CASE WHEN state = %s THEN %s ELSE state END, "
        f"scheduled_at = CASE WHEN state = %s THEN {v.plus_ms(conn)} ELSE {v.now(conn)} END "
        f"WHERE id IN ({_in(ids)}) AND state IN (%s, %s)",
        [
            State.SCHEDULED.value,
            State.AVAILABLE.value,
            State.RUNNING.value,
            1,
            *ids,
            State.SCHEDULED.value,
            State.RUNNING.value,
        ],
    )


def workflow_coordinators(
    *, after: str | None = None, limit: int = 50, using: str = "default"
) -> list[dict[str, Any]]:
    """A page of coordinators ordered by workflow id (cursor = the last workflow id)."""
    # Not NULL, as a coordinator's never is: MySQL/MariaDB's workflow_id index holds every
    # job, NULLs first, and the ordered scan would otherwise read past all plain jobs.
    qs = Job.objects.using(using).filter(kind=COORDINATOR_KIND, workflow_id__isnull=False)
    if after is not None:
        qs = qs.filter(workflow_id__gt=after)
    rows = qs.order_by("workflow_id").values(
        "workflow_id", "id", "state", "queue", "enqueued_at", "finalized_at"
    )[:limit]
    return [dict(row) for row in rows]


def workflow_live_node_ids(job_ids: Iterable[str], *, using: str = "default") -> list[str]:
    live = [
        s.value
        for s in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RUNNING, State.RETRYABLE)
    ]
    ids = list(job_ids)
    found: list[str] = []
    for start in range(0, len(ids), _CHUNK):
        found += list(
            Job.objects.using(using)
            .filter(pk__in=ids[start : start + _CHUNK], state__in=live)
            .values_list("id", flat=True)
        )
    return found


def workflow_live_job_ids(workflow_id: str, *, using: str = "default") -> list[str]:
    """Every unfinished job stamped with ``workflow_id`` except its coordinator: nodes,
    grafted nodes, and graft or retry receipts still waiting (one indexed query)."""
    live = [
        s.value
        for s in (State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RUNNING, State.RETRYABLE)
    ]
    return list(
        Job.objects.using(using)
        .filter(workflow_id=workflow_id, state__in=live)
        .exclude(pk=coordinator_job_id(workflow_id))
        .values_list("id", flat=True)
    )


def workflow_waiting_links(workflow_id: str, *, using: str = "default") -> list[str]:
    """The job ids of the workflow's child-workflow links that wait for their child now
    (released by the coordinator and not finished; one indexed query)."""
    waiting = [s.value for s in (State.SCHEDULED, State.AVAILABLE, State.RUNNING, State.RETRYABLE)]
    return list(
        Job.objects.using(using)
        .filter(workflow_id=workflow_id, kind=CHILD_KIND, state__in=waiting)
        .values_list("id", flat=True)
    )


def graft_receipt_id(workflow_id: str, revision: int) -> str:
    return f"{workflow_id}:graft:{revision}"


def retry_receipt_id(workflow_id: str, revision: int) -> str:
    return f"{workflow_id}:retry:{revision}"


def workflow_coordinator_lock(workflow_id: str, *, using: str = "default") -> Job | None:
    """The workflow's coordinator row, locked ``FOR UPDATE`` until the caller's transaction
    ends (Django refuses the lock outside ``transaction.atomic``), or None when there is no
    such workflow. A coordinator attempt takes the same row lock before it writes
    (``lock_held``), so while the caller holds it the workflow can neither finish nor
    accept another graft: checks made under it stay true until the commit."""
    return (
        Job.objects.using(using)
        .select_for_update()
        .filter(pk=coordinator_job_id(workflow_id))
        .first()
    )


def workflow_pending_receipt(job_id: str, kind: str, *, using: str = "default") -> Job | None:
    """A receipt job of ``kind`` waiting for the coordinator (a point read, never a scan).

    The kind is checked because only the library writes receipt kinds: another pending
    job that happens to sit at a receipt's id is not a receipt, and must be neither
    accepted nor deleted as one.
    """
    return Job.objects.using(using).filter(pk=job_id, state=State.PENDING.value, kind=kind).first()


def workflow_graft_decide(
    ref: LeaseRef,
    *,
    workflow_id: str,
    receipt: Job,
    accepted: bool,
    checkpoint: Checkpoint,
    grafts: list[dict[str, Any]],
    node_job_ids: list[str],
    reason: str = "",
    using: str = "default",
) -> None:
    """Accept (checkpoint the new revision, then release the receipt) or reject (remove
    the receipt and its never-run tasks). Either way the checkpoint, whose history holds
    the decision's event, is saved with it. Fenced; one transaction; audited in ``Graft``."""
    from headgate_django.kernel.workflow import Outcome

    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        lock_held(cursor, conn, ref, "id")
        _save_checkpoint(
            cursor,
            conn,
            ref.job_id,
            workflow_id,
            checkpoint,
            Outcome.WAITING.value,
            grafts if accepted else None,
        )
        if accepted:
            _promote(cursor, conn, [receipt.id])
        else:
            _delete(cursor, conn, [receipt.id, *node_job_ids])
        _graft_audit(
            cursor,
            conn,
            receipt_id=receipt.id,
            workflow_id=workflow_id,
            revision=checkpoint.revision if accepted else _revision_of(receipt.id),
            nodes=grafts[-len(node_job_ids) :] if accepted and node_job_ids else [],
            accepted=accepted,
            reason=reason,
            using=using,
        )


def _graft_audit(
    cursor: Any,
    conn: Any,
    *,
    receipt_id: str,
    workflow_id: str,
    revision: int,
    nodes: list[dict[str, Any]],
    accepted: bool,
    reason: str,
    using: str,
) -> None:
    """The ``Graft`` row recording a decision, stamped with the store clock."""
    from headgate_django.models import Graft

    cursor.execute(f"SELECT {v.now(conn)}", [])
    decided = v.parse_instant(conn, cursor.fetchone()[0])
    Graft.objects.using(using).update_or_create(
        receipt_job_id=receipt_id,
        defaults={
            "workflow_id": workflow_id,
            "revision": revision,
            "nodes": nodes,
            "status": "accepted" if accepted else "rejected",
            "reason": reason,
            "decided_at": decided,
        },
    )


def _revision_of(receipt_id: str) -> int:
    try:
        return int(receipt_id.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


def workflow_retry_apply(
    ref: LeaseRef,
    *,
    workflow_id: str,
    checkpoint: Checkpoint,
    reopen_job_ids: list[str],
    receipt_id: str | None,
    reject_receipt_id: str | None,
    reject_job_ids: Iterable[str] = (),
    reject_reason: str = "",
    using: str = "default",
) -> None:
    """Open a new generation: checkpoint first, then failed nodes back to ``pending`` (the
    coordinator promotes them when their dependencies are complete, as always). A graft
    receipt waiting for the revision the retry takes is rejected with its tasks and
    audited like any refused graft."""
    from headgate_django.kernel.workflow import Outcome

    conn = v.connection_for(using)
    failed = [State.ARCHIVED.value, State.CANCELLED.value, State.UNDECODABLE.value]
    with transaction.atomic(using=using), conn.cursor() as cursor:
        lock_held(cursor, conn, ref, "id")
        _save_checkpoint(
            cursor, conn, ref.job_id, workflow_id, checkpoint, Outcome.WAITING.value, None
        )
        if reopen_job_ids:
            cursor.execute(
                f"UPDATE {v.jobs_by_id(conn)} SET state = %s, attempt = 0, crash_attempt = 0, "
                f"scheduled_at = {v.now(conn)}, finalized_at = NULL, expires_at = NULL "
                f"WHERE id IN ({_in(reopen_job_ids)}) AND state IN ({_in(failed)})",
                [State.PENDING.value, *reopen_job_ids, *failed],
            )
        if receipt_id:
            _promote(cursor, conn, [receipt_id])
        if reject_receipt_id:
            _delete(cursor, conn, [reject_receipt_id, *reject_job_ids])
            _graft_audit(
                cursor,
                conn,
                receipt_id=reject_receipt_id,
                workflow_id=workflow_id,
                revision=_revision_of(reject_receipt_id),
                nodes=[],
                accepted=False,
                reason=reject_reason,
                using=using,
            )


def workflow_wake(workflow_id: str, *, using: str = "default") -> None:
    """Wake a workflow's coordinator now (a graft or retry receipt is waiting for it)."""
    from headgate_django.conf import headgate_settings

    if not headgate_settings.WORKFLOW_EVENT_WAKE:
        return
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        _wake(cursor, conn, [coordinator_job_id(workflow_id)])

"""Operator actions over many jobs at once: a selection, a count guard, set-based writes.

:func:`job_bulk_lock` locks the jobs a :class:`JobSelection` matches (in id order, never
more than the cap and one) inside the caller's transaction, so the count the operator
confirmed and the rows the action writes are the same rows. :func:`job_bulk_apply` then
moves those of them the state table allows, in a few statements whatever their number.

Internal jobs (``headgate:…`` kinds) are never selected: their owners keep rules these
writes know nothing of (see :mod:`.operator`), and a selection that names one is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from headgate_django.envelope import Envelope
from headgate_django.exceptions import BulkLimitError, CountMismatchError, DefinitionError
from headgate_django.kernel import names
from headgate_django.kernel.states import Event, State, sources
from headgate_django.models import Job
from headgate_django.store import vendor as v
from headgate_django.store.effect_records import effects_delete_gone
from headgate_django.store.fenced import after_finish
from headgate_django.store.insert import job_insert_many
from headgate_django.store.rows import prep
from headgate_django.store.unique_keys import live_holders

ACTIONS = ("retry", "cancel", "delete", "promote", "reschedule")
#: The states each action moves; a selected job in another state is left as it is.
ELIGIBLE: dict[str, frozenset[State]] = {
    "retry": sources(Event.OPERATOR_RETRY),
    "cancel": sources(Event.OPERATOR_CANCEL),
    "promote": sources(Event.OPERATOR_PROMOTE),
    "reschedule": sources(Event.OPERATOR_SCHEDULE),
    "delete": frozenset(State) - {State.RUNNING, State.DELETED},
}


@dataclass(frozen=True)
class JobSelection:
    """Which jobs an action is for: every given criterion must hold (at least one)."""

    queue: str | None = None
    kind: str | None = None
    states: tuple[str, ...] = ()
    enqueued_after: datetime | None = None
    enqueued_before: datetime | None = None
    finalized_after: datetime | None = None
    finalized_before: datetime | None = None
    ids: tuple[str, ...] = ()

    def check(self) -> None:
        """``DefinitionError`` for an empty or malformed selection; ``InternalKindError``
        for one that names an internal kind."""
        if self == JobSelection():
            raise DefinitionError("a bulk action needs at least one filter (or ids)")
        if self.kind is not None and names.is_internal_kind(self.kind):
            raise names.internal_kind_error(self.kind, "bulk actions refuse internal jobs")
        known = {s.value for s in State} - {State.DELETED.value}
        for state in self.states:
            if state not in known:
                raise DefinitionError(f"unknown state {state!r}", state=state)
        for name in ("enqueued_after", "enqueued_before", "finalized_after", "finalized_before"):
            at = getattr(self, name)
            if at is not None and at.tzinfo is None:
                raise DefinitionError(f"{name} must be timezone-aware", field=name)

    def queryset(self, using: str) -> QuerySet[Job]:
        qs = Job.objects.using(using).exclude(kind__startswith=names.INTERNAL_PREFIX)
        filters = {
            "queue": self.queue,
            "kind": self.kind,
            "enqueued_at__gt": self.enqueued_after,
            "enqueued_at__lt": self.enqueued_before,
            "finalized_at__gt": self.finalized_after,
            "finalized_at__lt": self.finalized_before,
        }
        qs = qs.filter(**{k: value for k, value in filters.items() if value is not None})
        if self.states:
            qs = qs.filter(state__in=self.states)
        if self.ids:
            qs = qs.filter(pk__in=self.ids)
        return qs


def job_bulk_lock(selection: JobSelection, *, limit: int, using: str = "default") -> list[str]:
    """The ids of at most ``limit`` matching jobs, row-locked until the caller's
    transaction ends. Listed ids of internal jobs are refused (``InternalKindError``)."""
    selection.check()
    if selection.ids:
        internal = (
            Job.objects.using(using)
            .filter(pk__in=selection.ids, kind__startswith=names.INTERNAL_PREFIX)
            .values_list("id", "kind")
            .first()
        )
        if internal is not None:
            raise names.internal_kind_error(
                internal[1], f"bulk actions refuse job {internal[0]}", id=internal[0]
            )
    locked = selection.queryset(using).select_for_update().order_by("id")
    return list(locked.values_list("id", flat=True)[:limit])


class BulkOutcome(NamedTuple):
    matched: int
    changed: int | None  # None: the job made by ``as_job`` does it
    job_id: str | None


def job_bulk_perform(
    action: str,
    selection: JobSelection,
    *,
    expected_count: int,
    max_jobs: int,
    sync_limit: int,
    as_job: Callable[[list[str]], Envelope],
    at: datetime | None = None,
    delay: timedelta | None = None,
    using: str = "default",
) -> BulkOutcome:
    """Lock, count and act in one transaction: ``CountMismatchError`` (nothing changed)
    unless exactly ``expected_count`` jobs match, ``BulkLimitError`` above ``max_jobs``;
    above ``sync_limit`` the envelope ``as_job(ids)`` is enqueued to do it instead."""
    with transaction.atomic(using=using):
        ids = job_bulk_lock(selection, limit=max_jobs + 1, using=using)
        if len(ids) > max_jobs:
            raise BulkLimitError(
                f"more than {max_jobs} jobs match (HEADGATE['BULK_MAX_JOBS']); narrow the filter",
                limit=max_jobs,
            )
        if len(ids) != expected_count:
            raise CountMismatchError(
                f"{len(ids)} jobs match, not the {expected_count} expected; nothing changed",
                expected_count=expected_count,
                actual_count=len(ids),
            )
        if len(ids) <= sync_limit:
            changed = job_bulk_apply(action, ids, at=at, delay=delay, using=using)
            return BulkOutcome(len(ids), changed, None)
        (job_id,) = job_insert_many([as_job(ids)], using=using)
    return BulkOutcome(len(ids), None, job_id)


def job_bulk_chunk(
    action: str,
    job_ids: Sequence[str],
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    using: str = "default",
) -> int:
    """:func:`job_bulk_apply` in a transaction of its own (one chunk of a bulk job)."""
    with transaction.atomic(using=using):
        return job_bulk_apply(action, job_ids, at=at, delay=delay, using=using)


def job_bulk_apply(
    action: str,
    job_ids: Sequence[str],
    *,
    at: datetime | None = None,
    delay: timedelta | None = None,
    using: str = "default",
) -> int:
    """Apply ``action`` to those of ``job_ids`` in a state it moves; return how many moved.

    Run it inside a transaction (``job_bulk_perform``'s, or ``job_bulk_chunk``'s): a
    cancel wakes the coordinators of the workflows it touched in it.
    """
    if action not in ACTIONS:
        raise DefinitionError(f"unknown bulk action {action!r}: one of {', '.join(ACTIONS)}")
    if not job_ids:
        return 0
    conn = v.connection_for(using)
    rows = list(
        Job.objects.using(using)
        .filter(pk__in=list(job_ids), state__in=[s.value for s in ELIGIBLE[action]])
        .exclude(kind__startswith=names.INTERNAL_PREFIX)
        .values_list("id", "workflow_id", "unique_key")
    )
    if action == "retry":
        rows = _free_keys(conn, rows)
    ids = [r[0] for r in rows]
    if not ids:
        return 0
    if action == "delete":
        deleted = int(Job.objects.using(using).filter(pk__in=ids).delete()[0])
        with conn.cursor() as cursor:
            effects_delete_gone(cursor, ids)
        return deleted
    set_sql, params = _set_clause(conn, action, at, delay)
    if action == "retry":
        return _retry_free(conn, rows, set_sql, params, using)
    with conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE headgate_job SET {set_sql} WHERE id IN ({v.placeholders(len(ids))})",
            [*params, *ids],
        )
        if action == "cancel":
            after_finish(cursor, conn, {r[0]: r[1] for r in rows})
    return len(ids)


def _retry_free(
    conn: Any, rows: list[tuple[str, Any, Any]], set_sql: str, params: list[Any], using: str
) -> int:
    """The retry's update, in a savepoint: an enqueue of one of the keys that had not
    committed when :func:`_free_keys` looked wins the unique index, and the update fails
    on it. The keys are then looked at again and the rows still free retried, so such a
    job is skipped like one whose key was taken before, not failing the whole chunk."""
    while rows:
        ids = [r[0] for r in rows]
        try:
            with transaction.atomic(using=using), conn.cursor() as cursor:
                cursor.execute(
                    f"UPDATE headgate_job SET {set_sql} WHERE id IN ({v.placeholders(len(ids))})",
                    [*params, *ids],
                )
            return len(ids)
        except IntegrityError:
            free = _free_keys(conn, rows)
            if len(free) == len(rows):
                raise  # not a key taken meanwhile
            rows = free
    return 0


def _free_keys(conn: Any, rows: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """Rows a retry may bring back to life: none whose unique key a live job now holds,
    and of several selected with one key only the first (the key admits one live job)."""
    held = {key for _, key in live_holders(conn, [r[2] for r in rows if r[2] is not None])}
    kept, seen = [], set(held)
    for row in rows:
        if row[2] is not None:
            if row[2] in seen:
                continue
            seen.add(row[2])
        kept.append(row)
    return kept


def _set_clause(
    conn: Any, action: str, at: datetime | None, delay: timedelta | None
) -> tuple[str, list[Any]]:
    now = v.now(conn)
    if action == "retry":
        return (
            f"state = %s, attempt = 0, crash_attempt = 0, scheduled_at = {now}, "
            "finalized_at = NULL, expires_at = NULL",
            [State.AVAILABLE.value],
        )
    if action == "cancel":
        return (
            f"state = %s, finalized_at = {now}, "
            f"expires_at = {v.plus_duration_column(conn, 'retention')}, "
            "lease_id = NULL, lease_expires_at = NULL",
            [State.CANCELLED.value],
        )
    if action == "promote":
        return f"state = %s, scheduled_at = {now}", [State.AVAILABLE.value]
    if (at is None) == (delay is None):
        raise DefinitionError("reschedule needs exactly one of at= or delay=")
    if delay is not None:
        return (
            f"state = %s, scheduled_at = {v.plus_ms(conn)}",
            [State.SCHEDULED.value, int(delay.total_seconds() * 1000)],
        )
    return "state = %s, scheduled_at = %s", [State.SCHEDULED.value, prep(conn, "scheduled_at", at)]

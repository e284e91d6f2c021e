"""The claim of queues an admission policy governs: concurrency ceilings per partition.

A governed queue (``headgate_queue_state.admission``) is left out of the plain claim, in
the same statement that leaves out paused queues, so a policy holds from the first claim
after it is written. Its jobs are claimed here, one queue per transaction:

1. lock the queue's ``headgate_queue_state`` row (``SELECT … FOR UPDATE``; on SQLite the
   claim's ``BEGIN IMMEDIATE`` already serialises every writer). Every claim of the queue
   takes this lock, and so does every change of its policy, so no two of them decide at
   once;
2. count the queue's running jobs per partition. A job is running from the claim that
   leased it until a verb moves it out, and an expired lease stays running until the
   reclaim duty moves it, so a killed worker's jobs keep their slots until then;
3. read candidates in claim order, without row locks, skipping partitions that are full
   (a full partition's jobs are never locked); with ``discard``, ``cancel_incoming`` or
   ``cancel_running`` a full partition's candidates are disposed of instead;
4. lease the admitted jobs (``lease_rows``), which rechecks each one is still available.

The count and the lease happen under the lock and in one transaction, and no other path
moves a job of the queue into running, so the ceiling holds under any number of workers.
On PostgreSQL the same steps run on the server, in one call (``store.governed_claim``);
these are the reference for what that call decides, and they still claim the queues whose
ceiling disposes of jobs there, and every governed queue on MySQL/MariaDB and SQLite.
The worker's process learns which queues are governed from a cache that a policy change
in the same process clears and that is otherwise at most :data:`_POLICY_TTL` old; until a
worker learns of a new policy it does not serve that queue (the plain claim skips it), and
a governed queue's claim reads the buckets whenever a rate class exists, whatever the
cache says, so the limit is never exceeded, only served a moment later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.kernel.states import State
from headgate_django.store import vendor as v
from headgate_django.store.buckets import Buckets
from headgate_django.store.fairness import claim_fair
from headgate_django.store.fenced import after_finish
from headgate_django.store.governed_claim import claim_queue_on_server, claims_on_server
from headgate_django.store.weights import claim_weighted, forget_books, ledger_add

#: Seconds a worker process trusts its view of the policies (:func:`current_policy`).
_POLICY_TTL = 0.25
_policies: dict[str, tuple[float, Policy]] = {}
_policies_lock = threading.Lock()
#: Candidates a claim reads per pass, beyond what it still needs, and its passes at most:
#: each pass either fills the claim or finds at least one more partition or class closed.
_PASS_SLACK = 16
_MAX_PASSES = 64
_ORDER = "priority DESC, scheduled_at, id"
#: The plain claim's exclusion of what this module claims: governed or paused queues, and
#: jobs of a configured rate class (a class nobody configured is fail-open).
PLAIN_EXCLUDES = (
    "queue NOT IN (SELECT name FROM headgate_queue_state WHERE paused = %s OR admission = %s) "
    "AND (rate_class IS NULL OR rate_class NOT IN (SELECT name FROM headgate_rate_bucket))"
)
PLAIN_EXCLUDES_PARAMS = (True, True)


class Policy(NamedTuple):
    """What this process knows of the admission policies: the governed queues and the
    configured rate classes."""

    governed: frozenset[str]
    classes: frozenset[str]
    backpressure: frozenset[str]  # queues with a limit of unfinished jobs
    fair: frozenset[str] = frozenset()  # queues with tenant fairness
    weighted: frozenset[str] = frozenset()  # queues with a weight
    disposing: frozenset[str] = frozenset()  # queues whose ceiling disposes of jobs


NO_POLICY = Policy(frozenset(), frozenset(), frozenset())


def forget_policy() -> None:
    """Drop the cached view of the policies and ledgers (one changed in this process)."""
    with _policies_lock:
        _policies.clear()
    forget_books()


def current_policy(conn: BaseDatabaseWrapper, using: str) -> Policy:
    """The admission policies as this process last read them, at most
    :data:`_POLICY_TTL` seconds ago: for a project with none, the plain claim's cost is one
    small query that often, not one per claim."""
    now = time.monotonic()
    known = _policies.get(using)
    if known is not None and now - known[0] < _POLICY_TTL:
        return known[1]
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT name, 'q' FROM headgate_queue_state WHERE admission = %s "
            "UNION ALL SELECT name, 'r' FROM headgate_rate_bucket "
            "UNION ALL SELECT queue, 'b' FROM headgate_backpressure "
            "UNION ALL SELECT queue, 'f' FROM headgate_fairness "
            "UNION ALL SELECT name, 'w' FROM headgate_queue_state WHERE weight IS NOT NULL "
            "UNION ALL SELECT queue, 'd' FROM headgate_concurrency_limit WHERE on_saturated <> %s",
            [True, "queue"],
        )
        rows = cursor.fetchall()

    def named(what: str) -> frozenset[str]:
        return frozenset(name for name, kind in rows if kind == what)

    policy = Policy(named("q"), named("r"), named("b"), named("f"), named("w"), named("d"))
    with _policies_lock:
        _policies[using] = (now, policy)
    return policy


def configured_rate_classes(*, using: str = "default") -> frozenset[str]:
    """The rate classes configured, as :func:`current_policy` last read them."""
    return current_policy(v.connection_for(using), using).classes


class Claimer(NamedTuple):
    """Who claims, and how (what :func:`~headgate_django.store.claim.lease_rows` needs)."""

    kinds: Sequence[str] | None
    lease_id: str
    worker_id: str
    ttl_ms: int
    using: str


def claim_admitted(
    conn: BaseDatabaseWrapper,
    policy: Policy,
    *,
    queues: Sequence[str] | None,
    limit: int,
    claimer: Claimer,
) -> list[Any]:
    """Claim up to ``limit`` jobs that a policy governs: from the governed queues among
    ``queues`` (all if None), then jobs of configured rate classes in the other queues.
    Their rows as :func:`~headgate_django.store.claim.lease_rows` reads them.

    When any of them has a weight, they share the claim by weight (``store.weights``);
    otherwise they take turns being first (a rotation per process), so a busy one cannot
    keep the claims of a worker serving several.
    """
    rows: list[Any] = []
    served = sorted(policy.governed.intersection(queues) if queues else policy.governed)
    if served and policy.weighted.intersection(served):

        def claim_one(queue: str, n: int, levels: dict[str, int]) -> tuple[list[Any], bool]:
            return _claim_one(conn, queue, n, policy, claimer, weighted=True, levels=levels)

        rows += claim_weighted(conn, served, limit, claim_one)
    elif served:
        start = next(_turn) % len(served)
        for queue in served[start:] + served[:start]:
            need = limit - len(rows)
            if need <= 0:
                return rows
            rows += _claim_one(conn, queue, need, policy, claimer, weighted=False)[0]
    need = limit - len(rows)
    if policy.classes and need > 0:
        with transaction.atomic(using=claimer.using), conn.cursor() as cursor:
            rows += _claim_rated(cursor, conn, queues, need, claimer)
    return rows


class _Turn:
    """A counter shared by a process's claim loops (``next`` on it is thread-safe)."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def __next__(self) -> int:
        with self._lock:
            self._n += 1
            return self._n


_turn = _Turn()


class _Ceiling(NamedTuple):
    queue: str
    max_concurrent: int
    on_saturated: str
    running: dict[str, int]


class _Admission:
    """One claim's decisions, pass after pass over candidates in claim order."""

    def __init__(self, need: int, buckets: Buckets | None, ceiling: _Ceiling | None) -> None:
        self.need = need
        self.buckets = buckets
        self.ceiling = ceiling
        self.admitted: list[str] = []
        self.passed_over: list[str] = []  # waiting: read, neither admitted nor disposed
        self.disposed: dict[State, list[str]] = {State.ARCHIVED: [], State.CANCELLED: []}
        self.victims: list[str] = []
        self.full: set[str] = set()
        self._free: dict[str, int] = {}

    def seen(self) -> list[str]:
        d = self.disposed
        return self.admitted + self.passed_over + d[State.ARCHIVED] + d[State.CANCELLED]

    def consider(self, cursor: Any, job_id: str, partition: str, cls: str | None, w: int) -> bool:
        """Rate class budget, then the concurrency ceiling (the order of Headgate's claim);
        whether the job is admitted."""
        if self.buckets is not None and not self.buckets.allows(cls, w):
            self.passed_over.append(job_id)
            return False
        ceiling = self.ceiling
        if ceiling is not None:
            if partition not in self._free:
                self._free[partition] = ceiling.max_concurrent - ceiling.running.get(partition, 0)
            if self._free[partition] > 0:
                self._free[partition] -= 1
            else:
                self.full.add(partition)
                strategy = ceiling.on_saturated
                if strategy == "queue":
                    self.passed_over.append(job_id)
                    return False
                if strategy != "cancel_running":
                    target = State.ARCHIVED if strategy == "discard" else State.CANCELLED
                    self.disposed[target].append(job_id)
                    return False
                victim = _oldest_running(cursor, ceiling.queue, partition, self.victims)
                if victim is None:  # every running job is one this claim admitted
                    self.passed_over.append(job_id)
                    return False
                self.victims.append(victim)
        if self.buckets is not None:
            self.buckets.spend(cls, w)
        self.admitted.append(job_id)
        return True

    def run(
        self,
        cursor: Any,
        conn: BaseDatabaseWrapper,
        where: list[str],
        params: list[Any],
        by_queue: bool,
    ) -> None:
        """Pass over candidates (``where``) until the claim is full or none are left."""
        for _ in range(_MAX_PASSES):
            want = self.need - len(self.admitted)
            if want <= 0:
                return
            clauses, values = list(where), list(params)
            seen = self.seen()
            if seen:
                clauses.append(f"id NOT IN ({v.placeholders(len(seen))})")
                values += seen
            if self.full and self.ceiling is not None and self.ceiling.on_saturated == "queue":
                clauses.append(f"partition_key NOT IN ({v.placeholders(len(self.full))})")
                values += sorted(self.full)
            closed = self.buckets.closed() if self.buckets is not None else []
            if closed:
                clauses.append(
                    f"(rate_class IS NULL OR rate_class NOT IN ({v.placeholders(len(closed))}))"
                )
                values += closed
            cursor.execute(
                "SELECT id, partition_key, rate_class, weight "
                f"FROM headgate_job{v.claim_index_hint(conn, by_queue)} "
                f"WHERE {' AND '.join(clauses)} ORDER BY {_ORDER} LIMIT %s",
                [*values, want + _PASS_SLACK],
            )
            found = cursor.fetchall()
            if not found:
                return
            for job_id, partition, cls, weight in found:
                if len(self.admitted) >= self.need:
                    return
                self.consider(cursor, job_id, partition, cls, weight)

    def commit(self, cursor: Any, conn: BaseDatabaseWrapper, claimer: Claimer) -> list[Any]:
        """Write the decisions: buckets, disposals, victims, then lease the admitted."""
        from headgate_django.store.claim import lease_rows

        if self.buckets is not None:
            self.buckets.save(cursor)
        finished: dict[str, str | None] = {}
        if self.victims:
            finished.update(_finish(cursor, conn, self.victims, State.CANCELLED, State.RUNNING))
        for state, ids in self.disposed.items():
            if ids:
                finished.update(_finish(cursor, conn, ids, state, State.AVAILABLE))
        if finished:
            after_finish(cursor, conn, finished)
        if not self.admitted:
            return []
        rows = lease_rows(
            cursor,
            conn,
            self.admitted,
            lease_id=claimer.lease_id,
            worker_id=claimer.worker_id,
            ttl_ms=claimer.ttl_ms,
        )
        # In the order admitted, which a worker starts them in: a fair claim's turns,
        # not the queue's claim order across tenants (the same order otherwise).
        position = {job_id: i for i, job_id in enumerate(self.admitted)}
        rows.sort(key=lambda row: position[row[0]])
        return rows


def _base_where(kinds: Sequence[str] | None) -> tuple[list[str], list[Any]]:
    where = [f"state = '{State.AVAILABLE.value}'"]
    params: list[Any] = []
    if kinds is not None:
        where.append(f"kind IN ({v.placeholders(len(kinds))})")
        params += kinds
    return where, params


def _claim_one(
    conn: BaseDatabaseWrapper,
    queue: str,
    need: int,
    policy: Policy,
    claimer: Claimer,
    *,
    weighted: bool,
    levels: dict[str, int] | None = None,
) -> tuple[list[Any], bool]:
    """One governed queue's claim in its own transaction, adding what it leased to the
    queue's ledger when ``weighted``: on PostgreSQL one call of the server's function
    (``store.governed_claim``), unless the queue's ceiling disposes of jobs. The rows,
    and whether it also wrote ``levels`` (``store.weights``), which only the function
    does."""
    if queue not in policy.disposing and claims_on_server(conn):
        claimed = claim_queue_on_server(
            conn, queue, need, claimer, weighted=weighted, levels=levels or {}
        )
        if claimed is not None:
            return claimed
    with transaction.atomic(using=claimer.using), conn.cursor() as cursor:
        got = _claim_queue(cursor, conn, queue, need, policy, claimer)
        if weighted:
            ledger_add(cursor, queue, len(got))
        return got, False


def _claim_queue(
    cursor: Any,
    conn: BaseDatabaseWrapper,
    queue: str,
    need: int,
    policy: Policy,
    claimer: Claimer,
) -> list[Any]:
    """One governed queue's claim, under its switch row's lock. The statement that takes
    it also reads the queue's ceiling and whether any rate class exists: the buckets are
    read when the table has one, not when this process's view of the policies (up to
    :data:`_POLICY_TTL` old) does, so a class configured a moment ago is charged from its
    first claim rather than skipped uncharged. It costs no round trip, and none when no
    class exists."""
    limit = "(SELECT {} FROM headgate_concurrency_limit c WHERE c.queue = q.name)"
    cursor.execute(
        f"SELECT q.admission, q.paused, {limit.format('max_concurrent')}, "
        f"{limit.format('on_saturated')}, EXISTS (SELECT 1 FROM headgate_rate_bucket) "
        f"FROM headgate_queue_state q WHERE q.name = %s{v.for_update(conn)}",
        [queue],
    )
    switch = cursor.fetchone()
    if switch is None or not switch[0] or switch[1]:
        return []  # no longer governed (the plain claim serves it), or paused
    ceiling = None
    if switch[2] is not None:
        ceiling = _Ceiling(queue, switch[2], switch[3], running_by_partition(cursor, queue))
    buckets = Buckets(cursor, conn) if switch[4] else None
    admission = _Admission(need, buckets, ceiling)
    if queue not in policy.fair or not claim_fair(cursor, conn, queue, admission, claimer.kinds):
        where, params = _base_where(claimer.kinds)
        admission.run(cursor, conn, [*where, "queue = %s"], [*params, queue], by_queue=True)
    return admission.commit(cursor, conn, claimer)


def _claim_rated(
    cursor: Any,
    conn: BaseDatabaseWrapper,
    queues: Sequence[str] | None,
    need: int,
    claimer: Claimer,
) -> list[Any]:
    """Jobs of configured rate classes in queues no policy governs, under the buckets'
    locks (which every claim spending them takes, in name order)."""
    buckets = Buckets(cursor, conn)
    classes = buckets.open()
    if not classes:
        return []
    where, params = _base_where(claimer.kinds)
    where.append(f"rate_class IN ({v.placeholders(len(classes))})")
    params += classes
    if queues:
        where.append(f"queue IN ({v.placeholders(len(queues))})")
        params += queues
    where.append(
        "queue NOT IN (SELECT name FROM headgate_queue_state WHERE paused = %s OR admission = %s)"
    )
    params += [True, True]
    admission = _Admission(need, buckets, None)
    admission.run(cursor, conn, where, params, by_queue=bool(queues))
    return admission.commit(cursor, conn, claimer)


def running_by_partition(cursor: Any, queue: str) -> dict[str, int]:
    """Running jobs of ``queue`` per partition (expired leases not yet reclaimed count)."""
    cursor.execute(
        "SELECT partition_key, COUNT(*) FROM headgate_job WHERE state = %s AND queue = %s "
        "GROUP BY partition_key",
        [State.RUNNING.value, queue],
    )
    return {partition: count for partition, count in cursor.fetchall()}


def _oldest_running(cursor: Any, queue: str, partition: str, skip: list[str]) -> str | None:
    """The partition's running job claimed first, other than those in ``skip``."""
    where = "state = %s AND queue = %s AND partition_key = %s"
    params: list[Any] = [State.RUNNING.value, queue, partition]
    if skip:
        where += f" AND id NOT IN ({v.placeholders(len(skip))})"
        params += skip
    cursor.execute(
        f"SELECT id FROM headgate_job WHERE {where} ORDER BY claimed_at, scheduled_at, id LIMIT 1",
        params,
    )
    found = cursor.fetchone()
    return None if found is None else found[0]


def _finish(
    cursor: Any, conn: BaseDatabaseWrapper, ids: list[str], target: State, source: State
) -> dict[str, str | None]:
    """Finish ``ids`` (still in ``source``) as ``target``, attempt-neutral; a running one
    loses its lease, so its handler learns at its next fenced write or renewal. Returns the
    finished jobs' workflow ids, for the hooks that commit with them."""
    id_list = v.placeholders(len(ids))
    cursor.execute(
        f"SELECT id, workflow_id FROM {v.jobs_by_id(conn)} WHERE id IN ({id_list}) "
        "AND state = %s"
        f"{v.for_update(conn)}",
        [*ids, source.value],
    )
    found = dict(cursor.fetchall())
    if not found:
        return {}
    cursor.execute(
        f"UPDATE {v.jobs_by_id(conn)} SET state = %s, finalized_at = {v.now(conn)}, "
        f"expires_at = {v.plus_duration_column(conn, 'retention')}, "
        f"lease_id = NULL, lease_expires_at = NULL "
        f"WHERE id IN ({v.placeholders(len(found))}) AND state = %s",
        [target.value, *found, source.value],
    )
    return found

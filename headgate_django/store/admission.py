"""Admission policies as rows: writes that take effect on the next claim, and their reads.

A policy change locks the queue's ``headgate_queue_state`` row, the lock every claim of a
governed queue takes (``store.admitted``), so a claim sees a policy whole or not at all.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from headgate_django.exceptions import NotFoundError
from headgate_django.kernel import admission as rates
from headgate_django.kernel import fairness as fair
from headgate_django.kernel.states import State
from headgate_django.models import (
    Backpressure,
    ConcurrencyLimit,
    Fairness,
    Job,
    PartitionDeficit,
    Quarantine,
    QueueState,
    RateBucket,
)
from headgate_django.store import vendor as v
from headgate_django.store.admitted import forget_policy, running_by_partition
from headgate_django.store.backpressure import unfinished
from headgate_django.store.buckets import store_clock_ms
from headgate_django.store.collation import refuse_case_clash
from headgate_django.store.fairness import partitions_waiting, turn_ahead, waiting_jobs


def _switch(queue: str, using: str) -> QueueState:
    """The queue's switch row, created if need be, locked until the transaction ends.
    A queue name the database would take for another queue's is refused first."""
    refuse_case_clash(QueueState, "name", queue, "queue", using)
    switch, _ = QueueState.objects.using(using).select_for_update().get_or_create(name=queue)
    return switch


def _govern(switch: QueueState, using: str) -> None:
    """Mark the queue governed exactly while a policy that shapes its claims exists."""
    governed = (
        switch.weight is not None
        or ConcurrencyLimit.objects.using(using).filter(queue=switch.name).exists()
        or Fairness.objects.using(using).filter(queue=switch.name).exists()
    )
    if switch.admission != governed:
        switch.admission = governed
        switch.save(using=using, update_fields=["admission", "updated_at"])
    forget_policy()


def concurrency_limit_set(
    queue: str, max_concurrent: int | None, on_saturated: str, *, using: str = "default"
) -> None:
    """Store (or with ``None`` remove) the queue's ceiling; the values are validated."""
    with transaction.atomic(using=using):
        switch = _switch(queue, using)
        if max_concurrent is None:
            ConcurrencyLimit.objects.using(using).filter(queue=queue).delete()
        else:
            ConcurrencyLimit.objects.using(using).update_or_create(
                queue=queue,
                defaults={"max_concurrent": max_concurrent, "on_saturated": on_saturated},
            )
        _govern(switch, using)


def concurrency_limits(*, using: str = "default") -> list[dict[str, Any]]:
    """Every ceiling, by queue."""
    rows = ConcurrencyLimit.objects.using(using).order_by("queue")
    return [
        {"queue": r.queue, "max_concurrent": r.max_concurrent, "on_saturated": r.on_saturated}
        for r in rows
    ]


def fairness_set(queue: str, quantum: int, credit_cap: int, *, using: str = "default") -> None:
    """Make the queue fair (or change its quantum and cap; the rotation keeps its place)."""
    with transaction.atomic(using=using):
        switch = _switch(queue, using)
        Fairness.objects.using(using).update_or_create(
            queue=queue, defaults={"quantum": quantum, "credit_cap": credit_cap}
        )
        _govern(switch, using)


def fairness_remove(queue: str, *, using: str = "default") -> bool:
    """Claim the queue in plain order again, forgetting its rotation; whether it was fair."""
    with transaction.atomic(using=using):
        switch = _switch(queue, using)
        deleted, _ = Fairness.objects.using(using).filter(queue=queue).delete()
        PartitionDeficit.objects.using(using).filter(queue=queue).delete()
        _govern(switch, using)
    return bool(deleted)


def fairness_policies(*, using: str = "default") -> list[dict[str, Any]]:
    """Every fair queue: its quantum, credit cap and where the rotation stands."""
    return [
        {
            "queue": f.queue,
            "quantum": f.quantum,
            "credit_cap": f.credit_cap,
            "turn": f.turn,
            "credit": f.credit,
        }
        for f in Fairness.objects.using(using).order_by("queue")
    ]


def queue_weight_set(queue: str, weight: int | None, *, using: str = "default") -> None:
    """Store (or with ``None`` remove) the queue's weight. A changed weight keeps the
    queue's virtual position (its ledger is rescaled); a new one starts level with the
    other weighted queues, so it is owed nothing for the time before."""
    with transaction.atomic(using=using):
        switch = _switch(queue, using)
        if weight is not None:
            if switch.weight is not None:
                switch.dispatched = fair.rescale(switch.dispatched, switch.weight, weight)
            else:
                others = QueueState.objects.using(using).filter(weight__isnull=False)
                book = {q.name: (q.dispatched, q.weight) for q in others if q.weight}
                book[queue] = (0, weight)
                switch.dispatched = fair.idle_floor(book, [q for q in book if q != queue])(queue)
        switch.weight = weight
        switch.save(using=using, update_fields=["weight", "dispatched", "updated_at"])
        _govern(switch, using)


def queue_weights(*, using: str = "default") -> list[dict[str, Any]]:
    """Every weighted queue with its ledger and its waiting jobs now."""
    rows = QueueState.objects.using(using).filter(weight__isnull=False).order_by("name")
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        return [
            {
                "queue": q.name,
                "weight": q.weight,
                "dispatched": q.dispatched,
                "available": waiting_jobs(cursor, conn, q.name),
            }
            for q in rows
        ]


def queue_weight_remove(queue: str, *, using: str = "default") -> bool:
    """Remove the queue's weight; whether it had one."""
    with transaction.atomic(using=using):
        had = QueueState.objects.using(using).filter(name=queue, weight__isnull=False).exists()
        if had:
            queue_weight_set(queue, None, using=using)
    return had


def rate_class_set(
    name: str, limit: int, window_ms: int, burst: int, paused: bool, *, using: str = "default"
) -> None:
    """Store a rate class. A new one starts full; a changed one keeps the tokens it had
    (refilled to now under its old rate), capped at its new burst."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        refuse_case_clash(RateBucket, "name", name, "rate class", using)
        now_ms = store_clock_ms(cursor, conn)
        bucket = RateBucket.objects.using(using).select_for_update().filter(pk=name).first()
        if bucket is None:
            tokens = float(burst)
        else:
            tokens = rates.refill(
                bucket.tokens,
                bucket.burst,
                bucket.limit_per_window,
                bucket.window_ms,
                now_ms - bucket.refilled_at_ms,
            )
        RateBucket.objects.using(using).update_or_create(
            name=name,
            defaults={
                "limit_per_window": limit,
                "window_ms": window_ms,
                "burst": burst,
                "paused": paused,
                "tokens": min(tokens, float(burst)),
                "refilled_at_ms": now_ms,
            },
        )
    forget_policy()


def rate_class_remove(name: str, *, using: str = "default") -> bool:
    """Remove a rate class (its jobs become fail-open); whether there was one."""
    deleted, _ = RateBucket.objects.using(using).filter(pk=name).delete()
    forget_policy()
    return bool(deleted)


def rate_classes(*, using: str = "default") -> list[dict[str, Any]]:
    """Every rate class with its tokens as of now (refilled on the store clock)."""
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        now_ms = store_clock_ms(cursor, conn)
    out = []
    for b in RateBucket.objects.using(using).order_by("name"):
        tokens = rates.refill(
            b.tokens, b.burst, b.limit_per_window, b.window_ms, now_ms - b.refilled_at_ms
        )
        out.append(
            {
                "name": b.name,
                "limit": b.limit_per_window,
                "window_ms": b.window_ms,
                "burst": b.burst,
                "paused": b.paused,
                "tokens": tokens,
            }
        )
    return out


def rate_bucket_reconcile(refunds: dict[str, int], *, using: str = "default") -> None:
    """Give back (or, negative, take) tokens for jobs whose actual cost differed from the
    weight they were charged at their claim; never above the bucket's burst."""
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        for name in sorted(refunds):
            delta = refunds[name]
            if delta:
                cursor.execute(
                    "UPDATE headgate_rate_bucket SET tokens = CASE WHEN tokens + %s > burst "
                    "THEN burst ELSE tokens + %s END WHERE name = %s",
                    [delta, delta, name],
                )


def backpressure_set(queue: str, max_unfinished: int | None, *, using: str = "default") -> None:
    """Store (or with ``None`` remove) the queue's limit of unfinished jobs."""
    refuse_case_clash(Backpressure, "queue", queue, "queue", using)
    with transaction.atomic(using=using):
        if max_unfinished is None:
            Backpressure.objects.using(using).filter(queue=queue).delete()
        else:
            Backpressure.objects.using(using).update_or_create(
                queue=queue, defaults={"max_unfinished": max_unfinished}
            )
    forget_policy()


def backpressure_limits(*, using: str = "default") -> list[dict[str, Any]]:
    """Every backpressure limit with the queue's unfinished jobs now (counted up to one
    past the limit)."""
    conn = v.connection_for(using)
    out = []
    with conn.cursor() as cursor:
        for b in Backpressure.objects.using(using).order_by("queue"):
            current = unfinished(cursor, b.queue, up_to=b.max_unfinished + 1)
            out.append({"queue": b.queue, "max_unfinished": b.max_unfinished, "current": current})
    return out


def explain_job(job_id: str, *, using: str = "default") -> dict[str, Any]:
    """Why a job is or is not claimable now: ``admissible``, ``blocked_by``, ``detail`` and
    ``estimated_admission_ms``, read (not locked) the way the claim decides, in its order:
    schedule, queue switch, rate class, concurrency ceiling, fairness, quarantine."""
    job = (
        Job.objects.using(using)
        .only(
            "id",
            "state",
            "queue",
            "partition_key",
            "rate_class",
            "weight",
            "fingerprint",
            "scheduled_at",
        )
        .filter(pk=job_id)
        .first()
    )
    if job is None:
        raise NotFoundError(f"job {job_id} does not exist", id=job_id)
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        now_ms = store_clock_ms(cursor, conn)

    def verdict(blocked_by: str | None, detail: dict[str, Any], eta: int | None) -> dict[str, Any]:
        return {
            "admissible": blocked_by is None and job.state == State.AVAILABLE.value,
            "blocked_by": blocked_by,
            "detail": {"state": job.state, **detail},
            "estimated_admission_ms": eta,
        }

    state = State(job.state)
    if state is State.QUARANTINED or (
        state in (State.AVAILABLE, State.SCHEDULED, State.RETRYABLE, State.PENDING)
        and Quarantine.objects.using(using).filter(pk=job.fingerprint).exists()
    ):
        return verdict("quarantine", {"fingerprint": job.fingerprint}, None)
    if state is State.PENDING:
        return verdict("schedule", {"pending": True}, None)
    if state in (State.SCHEDULED, State.RETRYABLE):
        due_ms = int(job.scheduled_at.timestamp() * 1000)
        return verdict(
            "schedule", {"scheduled_at": job.scheduled_at.isoformat()}, max(0, due_ms - now_ms)
        )
    if state is not State.AVAILABLE:
        return verdict(None, {}, None)  # running or finished: nothing to admit
    if QueueState.objects.using(using).filter(name=job.queue, paused=True).exists():
        return verdict("queue_paused", {"queue": job.queue}, None)
    if job.rate_class is not None:
        bucket = RateBucket.objects.using(using).filter(pk=job.rate_class).first()
        if bucket is not None:
            tokens = rates.refill(
                bucket.tokens,
                bucket.burst,
                bucket.limit_per_window,
                bucket.window_ms,
                now_ms - bucket.refilled_at_ms,
            )
            detail = {
                "rate_class": bucket.name,
                "tokens": round(tokens, 3),
                "needed": rates.spend_needed(job.weight, bucket.burst),
                "paused": bucket.paused,
            }
            if bucket.paused:
                return verdict("rate_class", detail, None)
            wait = rates.ms_until(
                tokens, job.weight, bucket.burst, bucket.limit_per_window, bucket.window_ms
            )
            if wait > 0:
                return verdict("rate_class", detail, wait)
    ceiling = ConcurrencyLimit.objects.using(using).filter(queue=job.queue).first()
    if ceiling is not None:
        with conn.cursor() as cursor:
            running = running_by_partition(cursor, job.queue).get(job.partition_key, 0)
        if running >= ceiling.max_concurrent:
            return verdict(
                "concurrency_limit",
                {
                    "queue": job.queue,
                    "partition_key": job.partition_key,
                    "running": running,
                    "max_concurrent": ceiling.max_concurrent,
                    "on_saturated": ceiling.on_saturated,
                },
                None,
            )
    with conn.cursor() as cursor:
        waiting_for = turn_ahead(cursor, conn, job.queue, job.partition_key)
    if waiting_for is not None:
        return verdict("fairness", waiting_for, None)
    return verdict(None, {}, 0)


def ceilings_in_use(*, using: str = "default") -> list[dict[str, Any]]:
    """Every ceiling with its running jobs per partition now (the console's view)."""
    conn = v.connection_for(using)
    out = []
    with conn.cursor() as cursor:
        for limit in concurrency_limits(using=using):
            running = running_by_partition(cursor, limit["queue"])
            out.append({**limit, "running": sorted(running.items())})
    return out


#: Partitions per fair queue the console shows, from the one whose turn it is.
CONSOLE_PARTITIONS = 6


def fairness_in_use(*, using: str = "default") -> list[dict[str, Any]]:
    """Every fair queue with its next partitions in rotation order, their waiting jobs
    and carried credit (the console's view)."""
    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        return [
            {**f, "partitions": partitions_waiting(cursor, conn, f["queue"], CONSOLE_PARTITIONS)}
            for f in fairness_policies(using=using)
        ]

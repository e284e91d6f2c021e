"""At-most-once effects (``ctx.once``): a function's database writes and the record that
it ran commit together, under the attempt's lease.

:func:`job_effect_once` locks the held job row (fenced: a stale attempt gets
``LeaseLostError`` before anything runs), looks for the effect's record, and only when
there is none runs the function and records its result, all in one transaction. A retry
(the worker was killed after that commit) finds the record and gets the result back
without running the function again; the unique key ``(job_id, name)`` backs it up. The
function's own writes must go to the same database alias to share the transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypeVar

from django.db import transaction

from headgate_django.envelope import check_result
from headgate_django.exceptions import DefinitionError, LeaseLostError
from headgate_django.models import Effect, Job
from headgate_django.store import packet
from headgate_django.store import vendor as v
from headgate_django.store.fenced import Completion, LeaseRef, job_complete_many, lock_held

T = TypeVar("T")
MAX_NAME = 255


class EffectRecord(NamedTuple):
    name: str
    result: Any
    fence: int
    created_at: datetime


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise DefinitionError(f"an effect name is 1–{MAX_NAME} characters, got {name!r}")


def job_effect_recorded(job_id: str, name: str, *, using: str = "default") -> tuple[bool, Any]:
    """``(True, result)`` if the job's effect ``name`` has run, else ``(False, None)``."""
    row = Effect.objects.using(using).filter(job_id=job_id, name=name).values_list("result").first()
    return (True, row[0]) if row is not None else (False, None)


def job_effect_once(
    ref: LeaseRef,
    name: str,
    fn: Callable[[], T],
    *,
    complete: Completion | None = None,
    lease_ttl: timedelta | None = None,
    using: str = "default",
) -> T:
    """Run ``fn`` at most once for the held job ``ref``, in one transaction with its record.

    A recorded effect returns its result unrun. ``fn`` raising rolls back its writes and
    records nothing; so does a result that is not JSON (``TypeError``/``ValueError``).
    With ``complete`` (the job's completion, its result left out) the job is completed, with
    the effect's result as its own, in the same commit: the effect is the job's last act.

    With ``lease_ttl`` (the worker's), a function that ran past a third of it renews the
    lease in the same commit. The worker's renewals leave the row alone while it is held
    here (see ``job_renew_free_leases``); its own renewal of the row, waiting for this
    commit, may not be queued yet when it comes, and a lease left lapsed by a long
    function would let the reclaim duty take the job from a live worker."""
    _check_name(name)
    conn = v.connection_for(using)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        (_, at) = lock_held(cursor, conn, ref, "fence")
        found, value = job_effect_recorded(ref.job_id, name, using=using)
        if not found:
            started = time.monotonic()
            value = fn()
            ran = time.monotonic() - started
            packet.check_result_sent(conn, value, check_result(value))
            Effect.objects.using(using).create(
                job_id=ref.job_id,
                name=name,
                result=value,
                fence=ref.fence,
                created_at=v.parse_instant(conn, at),
            )
            if lease_ttl is not None and complete is None and ran >= lease_ttl.total_seconds() / 3:
                cursor.execute(
                    f"UPDATE headgate_job SET lease_expires_at = {v.plus_ms(conn)} "
                    "WHERE id = %s AND lease_id = %s AND fence = %s",
                    [int(lease_ttl.total_seconds() * 1000), ref.job_id, ref.lease_id, ref.fence],
                )
        if complete is not None and not job_complete_many(
            [complete._replace(result=value)], using=using
        ):
            raise LeaseLostError(f"lease on job {ref.job_id} was lost (fence {ref.fence})")
    return value  # type: ignore[no-any-return]


def job_effects(job_id: str, *, using: str = "default") -> list[EffectRecord] | None:
    """The job's recorded effects, oldest first; None when there is no such job and none."""
    rows = [
        EffectRecord(*row)
        for row in Effect.objects.using(using)
        .filter(job_id=job_id)
        .order_by("created_at", "name")
        .values_list("name", "result", "fence", "created_at")
    ]
    if not rows and not Job.objects.using(using).filter(pk=job_id).exists():
        return None
    return rows

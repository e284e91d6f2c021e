"""Maintenance duties, each a singleton held through a store lease.

Every worker process runs this loop; only the holder of a duty's lease runs that duty, so
any number of hosts is safe and a dead holder is replaced when its lease lapses.

After a database outage the reclaim duty waits one renewal interval before it runs again.
The database clock kept running while nobody could write, so leases of live workers may
have lapsed during the outage; those workers renew them as soon as the database is back
(a renewal only needs the lease to be unclaimed, not unexpired), and must get the chance
to before the reclaim charges them a crash for an outage they survived.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import InterfaceError, OperationalError

from headgate_django import store
from headgate_django.conf import headgate_settings
from headgate_django.metrics import observe_eviction
from headgate_django.store.duties import duty_record

log = logging.getLogger("headgate_django.duties")


@dataclass
class Duty:
    name: str
    interval: float  # seconds
    run: Callable[[], dict[str, Any]]
    #: When it last ran (``time.monotonic()``); never, at first, so that it is due at once
    #: even on a host whose monotonic clock, which starts near boot, is below its interval.
    last: float = float("-inf")
    #: Seconds the duty waits once the database is back after an outage.
    after_outage: float = 0.0
    #: Given a run's result, seconds until the duty should run again when that is sooner
    #: than its interval (None: the interval). The scheduler's: when the next tick is due.
    wake: Callable[[dict[str, Any]], float | None] | None = None


#: Rows one promotion statement moves, and the seconds a promote run keeps going while its
#: batches come back full (a burst of jobs due at one instant, such as a minute's
#: schedule ticks written ahead): the rest is the next heartbeat's.
PROMOTE_BATCH = 1000
PROMOTE_BUDGET = 0.25


def _promote() -> dict[str, Any]:
    promoted, full = 0, True
    ends = time.monotonic() + PROMOTE_BUDGET
    while full and time.monotonic() < ends:
        moved = store.job_promote_due(limit=PROMOTE_BATCH)
        promoted += moved
        full = moved == PROMOTE_BATCH
    return {"promoted": promoted, "more": full}


def _reclaim() -> dict[str, Any]:
    report = store.job_reclaim_expired()
    if report.retried or report.quarantined:
        log.warning(
            "reclaimed %d expired lease(s); quarantined fingerprints: %s",
            len(report.retried) + len(report.quarantined),
            ", ".join(report.quarantined) or "none",
            extra={"reclaimed": report.retried, "quarantined": report.quarantined},
        )
    return {"retried": len(report.retried), "quarantined": len(report.quarantined)}


def _evict() -> dict[str, Any]:
    s = headgate_settings
    report = store.job_evict_pass(batch=s.EVICT_BATCH, budget=s.EVICT_BUDGET.total_seconds())
    observe_eviction(report.evicted, report.rows_per_second)
    if report.evicted:
        log.info(
            "evicted %d job(s) past retention in %.2f s (%.0f rows/s)%s: %s",
            report.rows,
            report.seconds,
            report.rows_per_second,
            "; more remain" if report.more else "",
            ", ".join(f"{k}={n}" for k, n in sorted(report.evicted.items())),
            extra={"evicted": report.evicted},
        )
    return {
        "evicted": report.evicted,
        "rows_per_second": round(report.rows_per_second, 1),
        "more": report.more,
    }


#: Rows one run of a clean-up duty below deletes. A run that deletes a full batch says
#: ``more``, and runs again on the next tick: at one batch a minute, a project writing
#: more rows than that (throttled keys, effects, API mutations) outgrew the duty for ever.
CLEANUP_BATCH = 1000


def _cleaned(key: str, n: int, batch: int = CLEANUP_BATCH) -> dict[str, Any]:
    return {key: n, "more": n >= batch}


def _purge_idempotency_records() -> dict[str, Any]:
    from headgate_django.store.idempotency import idempotency_purge_expired

    return _cleaned("purged", idempotency_purge_expired(limit=CLEANUP_BATCH))


def _evict_unique_windows() -> dict[str, Any]:
    """Throttle windows that lapsed with nobody enqueuing their key again."""
    return _cleaned("evicted", store.unique_window_evict(limit=CLEANUP_BATCH))


#: Where the next ``effects-prune`` run starts (an effect record's id). Per process; a
#: fresh one starts from the first record.
_effects_sweep = {"after": 0}


def _prune_effects() -> dict[str, Any]:
    """Records of at-most-once effects whose job was deleted without them (before the
    store deleted them with their job; see :mod:`headgate_django.store.effect_records`):
    one slice of the table a run, so a run reads its slice, not the table. A full slice
    that found some runs again on the next tick: a backlog clears at the database's pace,
    a clean table is read one slice a minute."""
    from headgate_django.store.effect_records import effect_sweep

    pruned, after = effect_sweep(after=_effects_sweep["after"], limit=CLEANUP_BATCH)
    _effects_sweep["after"] = after
    return {"pruned": pruned, "more": pruned > 0 and after != 0}


#: Workflows whose records one ``workflows-prune`` run deletes (and, of workflows without
#: a checkpoint, ``CLEANUP_BATCH`` records); a full run is followed by another on the
#: next tick.
WORKFLOW_PRUNE_BATCH = 500


def _prune_workflow_records() -> dict[str, Any]:
    """Checkpoints, signal emissions and graft records of workflows evicted more than
    ``WORKFLOW_RETENTION`` ago, and the emissions and graft records of evicted workflows
    that never wrote a checkpoint (:mod:`headgate_django.store.workflow_records`)."""
    from headgate_django.store.workflow_records import (
        workflow_records_prune,
        workflow_records_prune_without_checkpoint,
    )

    older_than = headgate_settings.WORKFLOW_RETENTION
    pruned = workflow_records_prune(older_than=older_than, limit=WORKFLOW_PRUNE_BATCH)
    strays = workflow_records_prune_without_checkpoint(older_than=older_than, limit=CLEANUP_BATCH)
    return {
        "pruned": len(pruned),
        "without_checkpoint": strays,
        "more": len(pruned) >= WORKFLOW_PRUNE_BATCH or strays >= CLEANUP_BATCH,
    }


def _archive_past_deadline() -> dict[str, Any]:
    """Waiting jobs whose deadline passed: archived (deadline_exceeded), never claimed."""
    from headgate_django.store.deadlines import job_archive_past_deadline

    archived = job_archive_past_deadline()
    if archived:
        log.info("archived %d job(s) past their deadline", len(archived))
    return {"archived": len(archived), "more": len(archived) >= 500}


def _schedule() -> dict[str, Any]:
    from headgate_django.schedules.scheduler import run_pass

    return run_pass()


def _prune_workers() -> dict[str, Any]:
    """Registry rows of workers gone or stopped for ``WORKER_RETENTION``, and per-minute
    counts older than a day."""
    from headgate_django.store.workers import worker_prune

    return worker_prune(retention=headgate_settings.WORKER_RETENTION)


def _schedule_wake(result: dict[str, Any]) -> float | None:
    from headgate_django.schedules.scheduler import wake_in

    return wake_in(result)


#: Extra duties registered by the workflow and durable layers.
EXTRA_DUTIES: list[Callable[[], Duty]] = []
EXTRA_DUTIES.append(lambda: Duty("idempotency-purge", 60.0, _purge_idempotency_records))
EXTRA_DUTIES.append(lambda: Duty("workers-prune", 60.0, _prune_workers))
EXTRA_DUTIES.append(lambda: Duty("unique-windows", 60.0, _evict_unique_windows))
EXTRA_DUTIES.append(lambda: Duty("effects-prune", 60.0, _prune_effects))
EXTRA_DUTIES.append(lambda: Duty("workflows-prune", 60.0, _prune_workflow_records))
EXTRA_DUTIES.append(
    lambda: Duty(
        "deadlines", headgate_settings.DUTY_INTERVAL.total_seconds(), _archive_past_deadline
    )
)


def default_duties() -> list[Duty]:
    base = headgate_settings.DUTY_INTERVAL.total_seconds()
    duties = [
        Duty("promote", min(base, 0.2), _promote),
        Duty(
            "reclaim", base, _reclaim, after_outage=headgate_settings.renew_interval.total_seconds()
        ),
        Duty("evict", base * 5, _evict),
        # Periodic schedules: one holder fires every due tick (schedules.scheduler).
        Duty("scheduler", min(base, 0.5), _schedule, wake=_schedule_wake),
    ]
    return duties + [make() for make in EXTRA_DUTIES]


class DutyRunner:
    """Runs whichever duties are due and held by this worker."""

    def __init__(self, holder: str, duties: list[Duty] | None = None) -> None:
        self.holder = holder
        self.duties = duties if duties is not None else default_duties()
        self._in_outage = False
        self._back_at = float("-inf")  # when the database last came back (monotonic)

    def tick(
        self,
        stopping: Callable[[], bool] = lambda: False,
        between: Callable[[], object] = lambda: None,
    ) -> None:
        """Run the duties that are due and held here, until ``stopping()`` says the worker
        was asked to stop: a duty not yet begun then waits for the next pass or the next
        holder, so that a shutdown does not wait for every duty of the pass in progress.

        ``between()`` runs before each duty that is due: the worker renews its leases
        there, which would otherwise wait for the whole pass (each duty is bounded by its
        own budget, but a pass adds them up, and a short lease can lapse meanwhile)."""
        try:
            self._tick(stopping, between)
        except (OperationalError, InterfaceError):
            self._in_outage = True  # a lost or refused connection, not a failing query
            raise

    def _tick(self, stopping: Callable[[], bool], between: Callable[[], object]) -> None:
        now = time.monotonic()
        for duty in self.duties:
            if stopping():
                return
            if now - duty.last < duty.interval:
                continue
            between()
            duty.last = now
            ttl = timedelta(seconds=max(10.0, duty.interval * 5))
            if not store.duty_acquire(duty.name, holder=self.holder, ttl=ttl):
                continue
            if self._in_outage:  # the acquire went through: the database is back
                self._in_outage = False
                self._back_at = now
            if now - self._back_at < duty.after_outage:
                continue
            try:
                result = duty.run()
            except (OperationalError, InterfaceError):
                raise  # the database is gone for every duty: the caller's outage handling
            except Exception:
                # One duty's bug must not starve the others: they run in a fixed order, and
                # a duty that raised each pass would keep every later one (reclaim,
                # eviction, the scheduler) from ever running. It is tried again at its
                # next interval.
                log.exception("duty %s failed; the other duties go on", duty.name)
                continue
            if result.get("more"):
                duty.last = float("-inf")  # a backlog remains: run again on the next tick
            elif duty.wake is not None:
                wake = duty.wake(result)
                if wake is not None and wake < duty.interval:
                    # Due again at now + wake: the heartbeat's next tick after that runs it.
                    duty.last = time.monotonic() + wake - duty.interval
            if duty.name not in ("promote", "scheduler") or any(result.values()):
                duty_record(duty.name, holder=self.holder, result=result)

    def release_all(self) -> None:
        store.duty_release(holder=self.holder)

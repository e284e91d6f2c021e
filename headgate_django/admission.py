"""Admission control: what may start, and when, decided inside the store's claim.

Rate classes are token buckets that jobs naming them (``Envelope.rate_class``) spend
their ``weight`` from (:func:`set_rate_class`); concurrency ceilings cap the running jobs of
each partition of a queue (:func:`set_concurrency_limit`); backpressure refuses an
enqueue that would take a queue past a number of unfinished jobs (:func:`set_backpressure`);
tenant fairness shares a queue's claims between its partitions by deficit round-robin
(:func:`set_fairness`). Every rule is evaluated in the claim's own transaction on
the store clock, so it holds across any number of worker processes and hosts; a change
takes effect on the next claim, without restarting workers. See the explanation
"Admission control" in the documentation for how and why it is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from headgate_django.kernel.admission import (
    validate_backpressure,
    validate_concurrency_limit,
    validate_rate_class_config,
)
from headgate_django.kernel.fairness import (
    DEFAULT_CREDIT_CAP,
    DEFAULT_QUANTUM,
    validate_fairness,
    validate_weight,
)
from headgate_django.kernel.names import validate_queue, validate_rate_class

__all__ = [
    "Admission",
    "apply_declared",
    "backpressure_limits",
    "concurrency_limits",
    "describe",
    "explain",
    "fair_queues",
    "queue_weights",
    "rate_classes",
    "remove_fairness",
    "remove_queue_weight",
    "remove_rate_class",
    "set_backpressure",
    "set_concurrency_limit",
    "set_fairness",
    "set_queue_weight",
    "set_rate_class",
]


def set_concurrency_limit(
    queue: str,
    max_concurrent: int | None,
    *,
    on_saturated: str = "queue",
    using: str = "default",
) -> None:
    """At most ``max_concurrent`` running jobs per partition of ``queue``; ``None`` removes
    the ceiling.

    ``on_saturated`` says what a claim does with a job whose partition is full: ``queue``
    (it waits, the default), ``discard`` (archived, attempt-neutral), ``cancel_incoming``
    (cancelled) or ``cancel_running`` (the partition's oldest running job is cancelled and
    this one admitted, in one transaction; the cancelled handler learns at its next fenced
    write or renewal). Raises :class:`~headgate_django.exceptions.DefinitionError` for a bad
    value, writing nothing.
    """
    from headgate_django.store.admission import concurrency_limit_set

    validate_queue(queue)
    if max_concurrent is not None:
        validate_concurrency_limit(max_concurrent, on_saturated)
    concurrency_limit_set(queue, max_concurrent, on_saturated, using=using)


def concurrency_limits(*, using: str = "default") -> list[dict[str, Any]]:
    """Every queue's ceiling: ``queue``, ``max_concurrent``, ``on_saturated``."""
    from headgate_django.store.admission import concurrency_limits as read

    return read(using=using)


def set_rate_class(
    name: str,
    *,
    limit: int,
    window: timedelta | float,
    burst: int | None = None,
    paused: bool = False,
    using: str = "default",
) -> None:
    """``limit`` tokens per ``window`` (a ``timedelta`` or seconds) for jobs whose
    ``rate_class`` is ``name``, at most ``burst`` (default ``limit``) saved up.

    A claim admits a job of the class only when the bucket holds its ``weight`` (a job
    heavier than ``burst`` waits for a full bucket); otherwise the job is not claimed, not
    locked and not charged an attempt, and becomes claimable when the tokens are due.
    ``paused=True`` stops the class at once (a kill switch). A job whose class is not
    configured runs without a limit (fail-open; workers warn once).
    """
    from headgate_django.store.admission import rate_class_set

    validate_rate_class(name)
    values = validate_rate_class_config(limit, window, burst, paused)
    rate_class_set(name, *values, using=using)


def remove_rate_class(name: str, *, using: str = "default") -> bool:
    """Remove a rate class; its jobs run unlimited from the next claim. Whether it existed."""
    from headgate_django.store.admission import rate_class_remove

    validate_rate_class(name)
    return rate_class_remove(name, using=using)


def rate_classes(*, using: str = "default") -> list[dict[str, Any]]:
    """Every rate class: ``name``, ``limit``, ``window_ms``, ``burst``, ``paused`` and its
    ``tokens`` now."""
    from headgate_django.store.admission import rate_classes as read

    return read(using=using)


def set_backpressure(queue: str, max_unfinished: int | None, *, using: str = "default") -> None:
    """Refuse any enqueue that would leave more than ``max_unfinished`` unfinished jobs
    (pending, scheduled, available, running, retryable) in ``queue``: it raises
    :class:`~headgate_django.BackpressureError` (HTTP 429) and writes nothing; a batch is
    refused whole. ``0`` closes the queue's intake; ``None`` removes the limit."""
    from headgate_django.store.admission import backpressure_set

    validate_queue(queue)
    if max_unfinished is not None:
        validate_backpressure(max_unfinished)
    backpressure_set(queue, max_unfinished, using=using)


def backpressure_limits(*, using: str = "default") -> list[dict[str, Any]]:
    """Every backpressure limit: ``queue``, ``max_unfinished`` and the ``current`` count."""
    from headgate_django.store.admission import backpressure_limits as read

    return read(using=using)


def set_fairness(
    queue: str,
    *,
    quantum: int = DEFAULT_QUANTUM,
    credit_cap: int = DEFAULT_CREDIT_CAP,
    using: str = "default",
) -> None:
    """Share ``queue``'s claims between its partitions (``partition_key``) by deficit
    round-robin: the partitions with waiting jobs take turns in key order, each turn worth
    ``quantum`` jobs (of weight 1; a job costs its ``weight``) plus the credit it carried
    from a turn cut short, at most ``credit_cap``. Work-conserving: a partition with
    nothing waiting is skipped and banks nothing. So a tenant with a deep backlog delays
    another tenant's new job by at most one turn per other busy tenant. Priority still
    orders jobs within a partition. Raises
    :class:`~headgate_django.exceptions.DefinitionError` for a bad value, writing nothing.
    """
    from headgate_django.store.admission import fairness_set

    validate_queue(queue)
    fairness_set(queue, *validate_fairness(quantum, credit_cap), using=using)


def remove_fairness(queue: str, *, using: str = "default") -> bool:
    """Claim ``queue`` in plain priority order again; whether it was fair."""
    from headgate_django.store.admission import fairness_remove

    validate_queue(queue)
    return fairness_remove(queue, using=using)


def fair_queues(*, using: str = "default") -> list[dict[str, Any]]:
    """Every fair queue: ``queue``, ``quantum``, ``credit_cap``, and where its rotation
    stands: the partition whose ``turn`` it is and the ``credit`` that turn has left."""
    from headgate_django.store.admission import fairness_policies

    return fairness_policies(using=using)


def set_queue_weight(queue: str, weight: int, *, using: str = "default") -> None:
    """Share the claims of a worker serving several queues by weight: while ``queue`` and
    another weighted queue both have work, they are claimed in the ratio of their weights
    (a governed queue without a weight among them counts 1): each claim goes to the queue
    furthest behind its share, by a ledger kept in the store. What one cannot use goes to
    the others. Priority still orders jobs only within a queue. Takes effect on the next
    claim; a changed weight keeps the queue's place in the ledger. Raises
    :class:`~headgate_django.exceptions.DefinitionError` for a bad queue name or a weight
    that is not an integer from 1, writing nothing.
    """
    from headgate_django.store.admission import queue_weight_set

    validate_queue(queue)
    queue_weight_set(queue, validate_weight(weight), using=using)


def remove_queue_weight(queue: str, *, using: str = "default") -> bool:
    """Remove ``queue``'s weight; whether it had one."""
    from headgate_django.store.admission import queue_weight_remove

    validate_queue(queue)
    return queue_weight_remove(queue, using=using)


def queue_weights(*, using: str = "default") -> list[dict[str, Any]]:
    """Every weighted queue: ``queue``, ``weight``, ``dispatched`` (its ledger: jobs
    claimed while weights applied) and ``available`` (waiting jobs, counted up to 10,001)."""
    from headgate_django.store.admission import queue_weights as read

    return read(using=using)


#: The values of :attr:`Admission.blocked_by`, besides ``None``.
BLOCKERS = (
    "rate_class",
    "concurrency_limit",
    "fairness",
    "quarantine",
    "schedule",
    "queue_paused",
)


@dataclass(frozen=True)
class Admission:
    """Why a job is, or is not, claimable now.

    ``admissible`` is true for an available job that the next claim may take;
    ``blocked_by`` names the first rule that holds it back (one of :data:`BLOCKERS`), or is
    ``None``; ``detail`` carries that rule's numbers (tokens, running counts, the instant
    it is due); ``estimated_admission_ms`` is how long until the rule lets it go, when that
    can be known (``None`` when it waits for something else: a slot, a promotion, a
    resume).
    """

    admissible: bool
    blocked_by: str | None
    detail: dict[str, Any] = field(default_factory=dict)
    estimated_admission_ms: int | None = None


def explain(job_id: str, *, using: str = "default") -> Admission:
    """The admission verdict for one job, read the way the claim decides (nothing is
    locked, so a busy queue may have moved on by the time you read it). Raises
    :class:`~headgate_django.NotFoundError` for an unknown job."""
    from headgate_django.store.admission import explain_job

    return Admission(**explain_job(job_id, using=using))


def declared() -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """The policies of ``HEADGATE["RATE_CLASSES"]``, ``["CONCURRENCY_LIMITS"]``,
    ``["BACKPRESSURE"]`` and ``["FAIRNESS"]`` as calls to make, each validated (the system check
    ``headgate.E009`` and :func:`apply_declared` read them through this). Raises
    :class:`~headgate_django.exceptions.DefinitionError` naming the entry at fault."""
    from headgate_django.conf import headgate_settings as s
    from headgate_django.exceptions import DefinitionError

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def entries(key: str) -> dict[Any, Any]:
        value = getattr(s, key)
        if not isinstance(value, dict):
            raise DefinitionError(f"HEADGATE[{key!r}] must be a dict")
        return value

    def at(key: str, name: Any, check: Any) -> Any:
        try:
            return check()
        except DefinitionError as exc:
            raise DefinitionError(f"HEADGATE[{key!r}][{name!r}]: {exc}") from None

    for name, entry in entries("RATE_CLASSES").items():

        def rate(name: Any = name, entry: Any = entry) -> dict[str, Any]:
            validate_rate_class(name)
            if not isinstance(entry, dict) or not {"limit", "window"} <= set(entry):
                raise DefinitionError("needs a dict with limit and window")
            unknown = set(entry) - {"limit", "window", "burst", "paused"}
            if unknown:
                raise DefinitionError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}")
            kw = {"burst": None, "paused": False, **entry}
            validate_rate_class_config(kw["limit"], kw["window"], kw["burst"], kw["paused"])
            return kw

        calls.append((set_rate_class, (name,), at("RATE_CLASSES", name, rate)))
    for queue, entry in entries("CONCURRENCY_LIMITS").items():

        def ceiling(queue: Any = queue, entry: Any = entry) -> tuple[int, str]:
            validate_queue(queue)
            if isinstance(entry, dict):
                unknown = set(entry) - {"max_concurrent", "on_saturated"}
                if unknown or "max_concurrent" not in entry:
                    raise DefinitionError("needs max_concurrent and at most on_saturated")
                return validate_concurrency_limit(
                    entry["max_concurrent"], entry.get("on_saturated", "queue")
                )
            return validate_concurrency_limit(entry, "queue")

        n, strategy = at("CONCURRENCY_LIMITS", queue, ceiling)
        calls.append((set_concurrency_limit, (queue, n), {"on_saturated": strategy}))
    for queue, entry in entries("BACKPRESSURE").items():

        def limit(queue: Any = queue, entry: Any = entry) -> int:
            validate_queue(queue)
            return validate_backpressure(entry)

        calls.append((set_backpressure, (queue, at("BACKPRESSURE", queue, limit)), {}))
    for queue, entry in entries("FAIRNESS").items():
        kwargs = at("FAIRNESS", queue, lambda q=queue, e=entry: _fairness_entry(q, e))
        calls.append((set_fairness, (queue,), kwargs))
    return calls


def _fairness_entry(queue: Any, entry: Any) -> dict[str, int]:
    """One ``HEADGATE["FAIRNESS"]`` entry as :func:`set_fairness`'s keyword arguments."""
    from headgate_django.exceptions import DefinitionError

    validate_queue(queue)
    if entry is True:
        entry = {}
    if not isinstance(entry, dict) or set(entry) - {"quantum", "credit_cap"}:
        raise DefinitionError("needs True or a dict with at most quantum and credit_cap")
    kw = {"quantum": DEFAULT_QUANTUM, "credit_cap": DEFAULT_CREDIT_CAP, **entry}
    validate_fairness(kw["quantum"], kw["credit_cap"])
    return kw


def declared_weights() -> list[tuple[str, int]]:
    """``HEADGATE["QUEUE_WEIGHTS"]`` as ``(queue, weight)`` pairs, each validated (the
    system check ``headgate.E010`` and :func:`apply_declared` read them through this)."""
    from headgate_django.conf import headgate_settings as s
    from headgate_django.exceptions import DefinitionError

    value = s.QUEUE_WEIGHTS
    if not isinstance(value, dict):
        raise DefinitionError("HEADGATE['QUEUE_WEIGHTS'] must be a dict of queue → weight")
    pairs = []
    for queue, weight in value.items():
        try:
            pairs.append((validate_queue(queue), validate_weight(weight)))
        except DefinitionError as exc:
            raise DefinitionError(f"HEADGATE['QUEUE_WEIGHTS'][{queue!r}]: {exc}") from None
    return pairs


def apply_declared(*, using: str = "default") -> int:
    """Write the declared policies into the store (what ``runworkers`` does at start);
    how many. Policies set at runtime for other names are left as they are."""
    calls = declared()
    weights = declared_weights()
    for fn, args, kwargs in calls:
        fn(*args, **kwargs, using=using)
    for queue, weight in weights:
        set_queue_weight(queue, weight, using=using)
    return len(calls) + len(weights)


def describe(verdict: Admission) -> str:
    """A verdict in words, as the console's job page shows it."""
    d, eta = verdict.detail, verdict.estimated_admission_ms
    soon = f", next in {eta} ms" if eta else ""
    if verdict.admissible:
        return "admissible: the next claim may take it"
    if verdict.blocked_by is None:
        return f"not waiting ({d.get('state')})"
    if verdict.blocked_by == "rate_class":
        if d.get("paused"):
            return f"waiting: rate class {d['rate_class']} is paused"
        return f"waiting: rate class {d['rate_class']} has {d['tokens']:g} tokens{soon}"
    if verdict.blocked_by == "concurrency_limit":
        partition = d["partition_key"] or "(none)"
        return (
            f"waiting: partition {partition} of queue {d['queue']} runs "
            f"{d['running']} of {d['max_concurrent']}"
        )
    if verdict.blocked_by == "schedule":
        if d.get("pending"):
            return "waiting: pending until promoted"
        return f"waiting: scheduled for {d['scheduled_at']}{soon}"
    if verdict.blocked_by == "fairness":
        return (
            f"waiting: partition {d['turn'] or '(none)'} has the turn in queue {d['queue']}, "
            f"{d['partitions_ahead']} turn(s) before partition {d['partition_key'] or '(none)'}"
        )
    if verdict.blocked_by == "queue_paused":
        return f"waiting: queue {d['queue']} is paused"
    return f"waiting: {verdict.blocked_by.replace('_', ' ')}"

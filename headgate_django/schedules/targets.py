"""What a schedule starts on each tick, stored as JSON, and starting it.

Three targets: a task (an envelope template), a registered workflow factory (a function
that returns the ``Workflow`` for a tick) and a durable workflow. Each tick's job id,
workflow id or durable execution id and business key is ``tick_id(schedule, tick)``, so
starting the same tick twice leaves one job, one workflow, one execution.

User code (a factory) runs in :func:`prepare`, before the scheduler's transaction opens;
:meth:`Firing.write` only writes, inside it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from headgate_django.envelope import Envelope, check_fields, check_payload, check_payload_size
from headgate_django.exceptions import IdConflictError, PayloadNotJSONError, ScheduleError
from headgate_django.kernel.names import writing_ticks
from headgate_django.kernel.schedule_origin import tick_id

log = logging.getLogger("headgate_django.schedules")

#: ``factory(workflow_id, tick_at)`` → a ``Workflow`` (or its prepared batch) with that id.
Factory = Callable[[str, datetime], Any]
_FACTORIES: dict[str, Factory] = {}
# Envelope fields a tick decides, which a template must leave alone (a tick's uniqueness
# is its id; a stored schedule keeps no deadline).
_PER_TICK = (
    "id",
    "scheduled_at",
    "delay",
    "pending",
    "unique_key",
    "workflow_id",
    "unique_window",
    "unique_replace",
    "unique_debounce",
    "deadline",
)
_SECONDS = ("retention", "timeout")
_KEPT = ("kind", "queue", "priority", "schema_version", "max_attempts", *_SECONDS)


@dataclass(frozen=True)
class WorkflowTarget:
    factory: str


@dataclass(frozen=True)
class DurableTarget:
    name: str
    version: str
    input: Any = None
    task_queue: str = "default"


Target = Envelope | WorkflowTarget | DurableTarget


def workflow_factory(name: str) -> Callable[[Factory], Factory]:
    """Register ``fn(workflow_id, tick_at)`` as the workflow factory ``name``."""

    def register(fn: Factory) -> Factory:
        existing = _FACTORIES.get(name)
        if existing is not None and existing is not fn and _origin(existing) != _origin(fn):
            raise ScheduleError(f"workflow factory {name!r} is already registered")
        _FACTORIES[name] = fn
        return fn

    return register


def _origin(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def encode(target: Target) -> dict[str, Any]:
    """The JSON a schedule stores for ``target``; :class:`ScheduleError` if it cannot fire,
    :class:`PayloadTooLargeError` if its payload or input is over
    ``HEADGATE["MAX_PAYLOAD_BYTES"]`` (every tick would be refused: better said at upsert)."""
    if isinstance(target, Envelope):
        return _encode_envelope(target)
    if isinstance(target, WorkflowTarget):
        if target.factory not in _FACTORIES:
            raise ScheduleError(f"no workflow factory {target.factory!r} is registered")
        return {"type": "workflow", "factory": target.factory}
    if isinstance(target, DurableTarget):
        from headgate_django.durable.registry import find_workflow

        if find_workflow(target.name, target.version) is None:
            raise ScheduleError(f"no durable workflow {target.name!r} {target.version!r}")
        _durable_input(target)
        return {"type": "durable", **{f.name: getattr(target, f.name) for f in fields(target)}}
    raise ScheduleError(
        "a schedule target is an Envelope (task.envelope(...)), schedules.workflow(name) "
        f"or schedules.durable(name, version, input), not {type(target).__name__}"
    )


def _encode_envelope(env: Envelope) -> dict[str, Any]:
    set_per_tick = [name for name in _PER_TICK if getattr(env, name) not in (None, False)]
    if set_per_tick:
        raise ScheduleError(f"a schedule's envelope cannot set {', '.join(set_per_tick)}")
    check_fields(env)
    # The store checks a job's payload at enqueue, at every tick: too late to tell the
    # caller, so the template is held to the same limit here.
    check_payload_size(len(env.payload), f"payload (args and kwargs) of task target {env.kind!r}")
    try:
        payload = bytes(env.payload).decode()
    except UnicodeDecodeError as exc:
        raise ScheduleError("a schedule's envelope payload must be UTF-8 text") from exc
    out: dict[str, Any] = {"type": "task", "payload": payload}
    for name in _KEPT:
        value = getattr(env, name)
        out[name] = value.total_seconds() if name in _SECONDS and value is not None else value
    return out


def _durable_input(target: DurableTarget) -> None:
    """Refuse an input each tick's start would refuse (``Client.start``'s rule)."""
    try:
        check_payload(target.input, f"input of durable target {target.name!r}")
    except PayloadNotJSONError as exc:
        raise ScheduleError(f"a durable target's input must be JSON: {exc.__cause__}") from exc


def target_label(target: dict[str, Any]) -> tuple[str, str]:
    """What a stored target starts, without its payload: (type, the kind, factory or
    durable workflow it names)."""
    name = target.get("kind") or target.get("factory") or target.get("name") or ""
    return target.get("type", ""), name


def envelope_of(target: dict[str, Any], job_id: str) -> Envelope:
    kept = {name: target[name] for name in _KEPT}
    for name in _SECONDS:
        if kept[name] is not None:
            kept[name] = timedelta(seconds=kept[name])
    return Envelope(payload=target["payload"].encode(), id=job_id, **kept)


@dataclass(frozen=True)
class Firing:
    """One tick made ready to start: ``write()`` starts it, or ``failure`` says why not."""

    tick_at: datetime
    target_id: str
    write: Callable[[str], str] | None = None  # using → outcome
    failure: str = ""
    #: A task tick's job, which :func:`write_many` inserts with the batch's other jobs.
    envelope: Envelope | None = None


def prepare(schedule: str, target: dict[str, Any], tick_at: datetime, suffix: str = "") -> Firing:
    """Make ``schedule``'s tick ready to start, running a workflow factory if there is one.

    A factory that raises, or returns a workflow without the tick's id, yields a failed
    firing: the tick's event says why and the schedule keeps ticking.
    """
    ident = tick_id(schedule, tick_at, suffix)
    kind = target.get("type")
    try:
        if kind == "task":
            # Scheduled for its tick, whenever it is written: ahead (the lookahead), it
            # waits for its instant; late, it is claimable at once, in its tick's order.
            env = dataclasses.replace(envelope_of(target, ident), scheduled_at=tick_at)
            return Firing(tick_at, ident, _as_tick(ident, _insert, [env]), envelope=env)
        if kind == "workflow":
            with writing_ticks([ident]):  # the factory builds ``Workflow(ident)``
                batch = _workflow_batch(target["factory"], ident, tick_at)
            return Firing(tick_at, ident, _as_tick(ident, _enqueue_batch, batch))
        if kind == "durable":
            return Firing(tick_at, ident, _as_tick(ident, _start_durable, target, ident))
    except Exception as exc:  # a user's factory: anything it raises is the tick's failure
        log.warning("schedule %s: tick %s failed: %s", schedule, tick_at, exc, exc_info=True)
        return Firing(tick_at, ident, failure=f"{type(exc).__name__}: {exc}")
    return Firing(tick_at, ident, failure=f"unknown target type {kind!r}")


def _as_tick(ident: str, start: Callable[..., str], *args: Any) -> Callable[[str], str]:
    """``start(*args, using)`` allowed to write the tick's ids, which callers may not take
    (the ``sched:`` prefix is reserved: ``kernel.names.check_not_reserved``)."""

    def write(using: str) -> str:
        with writing_ticks([ident]):
            return start(*args, using)

    return write


def _workflow_batch(factory: str, workflow_id: str, tick_at: datetime) -> Any:
    fn = _FACTORIES.get(factory)
    if fn is None:
        raise ScheduleError(f"no workflow factory {factory!r} is registered in this worker")
    made = fn(workflow_id, tick_at)
    prepared = made.prepare() if hasattr(made, "prepare") else made
    if getattr(prepared, "workflow_id", None) != workflow_id:
        raise ScheduleError(f"factory {factory!r} must build Workflow(workflow_id)")
    return prepared


def _insert(envelopes: list[Envelope], using: str) -> str:
    from headgate_django.store import job_insert_many

    job_insert_many(envelopes, using=using)
    return "enqueued"


def _enqueue_batch(batch: Any, using: str) -> str:
    from headgate_django.enqueue import enqueue

    enqueue(batch, using=using)
    return "enqueued"


def _start_durable(target: dict[str, Any], ident: str, using: str) -> str:
    from headgate_django.durable.client import Client

    try:
        result = Client(using=using).start(
            target["name"],
            target["version"],
            target["input"],
            business_idempotency_key=ident,
            workflow_id=ident,
            task_queue=target["task_queue"],
        )
    except IdConflictError:
        return "deduplicated"  # this tick's execution ran already and finished
    return "deduplicated" if result.deduplicated else "enqueued"


def write_many(firings: list[Firing], using: str) -> list[tuple[str, str]]:
    """Start prepared ticks inside the scheduler's transaction: (outcome, reason) of each.

    Every task tick's job goes in with one insert (a job id that exists with the same
    content is the store's idempotent no-op, so a replayed tick is never doubled). If the
    store refuses that insert (a quarantined kind, an id taken by other content), it rolls
    back alone and each task tick is tried on its own, so only the refused ones fail.
    Workflow and durable ticks start one by one, each in its own savepoint.
    """
    from headgate_django.store.schedules import schedule_tick_write

    envelopes = [f.envelope for f in firings if f.envelope is not None]
    together = False
    if len(envelopes) > 1:
        with writing_ticks(f.target_id for f in firings):
            outcome, _ = schedule_tick_write(lambda: _insert(envelopes, using), using=using)
        together = outcome == "enqueued"
    return [
        ("enqueued", "") if together and f.envelope is not None else write(f, using)
        for f in firings
    ]


def write(firing: Firing, using: str) -> tuple[str, str]:
    """Start a prepared tick inside the scheduler's transaction: (outcome, reason)."""
    from headgate_django.store.schedules import schedule_tick_write

    if firing.write is None:
        return "failed", firing.failure
    write = firing.write
    return schedule_tick_write(lambda: write(using), using=using)

"""History events, commands and outcomes of the durable replay engine, and the history index.

Split from :mod:`headgate_django.kernel.replay` so the engine module holds one concept: this
module says *what* is recorded; the engine says how code is matched against it. The contract
that ties them together (which event the runtime appends for which command or external fact)
is in the docstring of :mod:`headgate_django.kernel.replay`.

:func:`index_history` validates a history in one pass and indexes it by command identity, so
the engine answers every primitive call in O(1) and a pass over N events costs O(N).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from headgate_django.exceptions import HistoryCorruptError, NondeterminismError

# -- event types ---------------------------------------------------------------------

WORKFLOW_STARTED = "WorkflowStarted"
OPERATION_SCHEDULED = "OperationScheduled"
OPERATION_COMPLETED = "OperationCompleted"
OPERATION_FAILED = "OperationFailed"
OPERATION_UNCERTAIN = "OperationUncertain"
OPERATION_UNCERTAIN_RESOLVED = "OperationUncertainResolved"
TIMER_SCHEDULED = "TimerScheduled"
TIMER_FIRED = "TimerFired"
SIGNAL_RECEIVED = "SignalReceived"
SELECT_RESOLVED = "SelectResolved"
WORKFLOW_COMPLETED = "WorkflowCompleted"
WORKFLOW_FAILED = "WorkflowFailed"
WORKFLOW_CANCELLED = "WorkflowCancelled"
#: A run ended by ``ctx.continue_as_new``: the execution goes on in a fresh run.
WORKFLOW_CONTINUED_AS_NEW = "WorkflowContinuedAsNew"
#: ``ctx.patched(change_id)`` took the new branch here (recorded once per change id).
PATCH_RECORDED = "PatchRecorded"
CHILD_STARTED = "ChildStarted"
CHILD_COMPLETED = "ChildCompleted"
CHILD_FAILED = "ChildFailed"
#: Audit-only events an operator's Suspend/Resume may append; replay ignores them.
WORKFLOW_SUSPENDED = "WorkflowSuspended"
WORKFLOW_RESUMED = "WorkflowResumed"
#: An update passed its validator (written by the caller) / its handler ran (by a pass).
UPDATE_ACCEPTED = "UpdateAccepted"
UPDATE_COMPLETED = "UpdateCompleted"

#: Events a pass's commands produce: each must be matched by the code on every replay.
COMMAND_EVENT_TYPES = frozenset(
    {OPERATION_SCHEDULED, TIMER_SCHEDULED, SELECT_RESOLVED, PATCH_RECORDED, CHILD_STARTED}
)
TERMINAL_EVENT_TYPES = frozenset(
    {WORKFLOW_COMPLETED, WORKFLOW_FAILED, WORKFLOW_CANCELLED, WORKFLOW_CONTINUED_AS_NEW}
)
#: Endings the code itself reaches: replay must reach the same one.
CODE_ENDINGS = frozenset({WORKFLOW_COMPLETED, WORKFLOW_FAILED, WORKFLOW_CONTINUED_AS_NEW})

#: Command identity prefixes; the number after them counts calls of that kind in one pass.
OP_PREFIX = "op:"
TIMER_PREFIX = "timer:"
SELECT_PREFIX = "select:"
SIGNAL_PREFIX = "signal:"
#: Patch markers are keyed by their change id, not counted: ``patch:<change id>``.
PATCH_PREFIX = "patch:"
CHILD_PREFIX = "child:"

#: What happens to a child still live when its parent finishes (completed, failed, cancelled).
PARENT_CLOSE_POLICIES = ("terminate", "abandon", "request_cancel")
#: The signal a ``request_cancel`` child receives when its parent finishes; its payload is
#: ``{"parent_id": ..., "parent_state": ...}``. Wait for it to wind down cleanly.
CANCEL_REQUESTED = "headgate.cancel-requested"

UNCERTAIN_DECISIONS = frozenset({"complete", "fail", "retry"})


@dataclass(frozen=True)
class Event:
    """One history record. ``at_ms`` is the store clock at append time (epoch milliseconds)."""

    seq: int
    type: str
    payload: dict[str, Any]
    at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "type": self.type, "payload": self.payload, "at_ms": self.at_ms}

    @classmethod
    def from_dict(cls, data: Any) -> Event:
        """Read one exported event, refusing wrong shapes rather than guessing."""
        if not isinstance(data, Mapping) or set(data) != {"seq", "type", "payload", "at_ms"}:
            raise HistoryCorruptError(
                f"An event must be an object with exactly seq, type, payload, at_ms: {data!r}"
            )
        seq, type_, payload, at_ms = data["seq"], data["type"], data["payload"], data["at_ms"]
        if not (_is_int(seq) and _is_int(at_ms) and isinstance(type_, str)):
            raise HistoryCorruptError(f"Event fields have wrong types: {data!r}")
        if not isinstance(payload, dict):
            raise HistoryCorruptError(f"Event {seq} payload must be an object: {payload!r}")
        return cls(seq, type_, payload, at_ms)


# -- commands: what a pass asks the runtime to record and do ------------------------


@dataclass(frozen=True)
class ScheduleOperation:
    """Run Operation ``name@version`` with ``input``; ``execution_key`` dedupes its job."""

    event_type: ClassVar[str] = OPERATION_SCHEDULED

    command_id: str
    name: str
    version: str
    input: Any
    execution_key: str

    def event_payload(self) -> dict[str, Any]:
        return {
            "command_id": self.command_id,
            "name": self.name,
            "version": self.version,
            "input": self.input,
            "execution_key": self.execution_key,
        }


@dataclass(frozen=True)
class StartTimer:
    """A durable timer due at ``fire_at_ms`` on the store clock."""

    event_type: ClassVar[str] = TIMER_SCHEDULED

    command_id: str
    duration_ms: int
    fire_at_ms: int

    def event_payload(self) -> dict[str, Any]:
        return {
            "command_id": self.command_id,
            "duration_ms": self.duration_ms,
            "fire_at_ms": self.fire_at_ms,
        }


@dataclass(frozen=True)
class RecordSelect:
    """A ``select`` resolved to ``index`` among the futures named by ``futures``.

    Recording it lets replay prove it resolves the same way (and detect reordered arguments);
    it causes no work in the runtime.
    """

    event_type: ClassVar[str] = SELECT_RESOLVED

    command_id: str
    index: int
    futures: tuple[str, ...]

    def event_payload(self) -> dict[str, Any]:
        return {"command_id": self.command_id, "index": self.index, "futures": list(self.futures)}


@dataclass(frozen=True)
class RecordPatch:
    """``ctx.patched(patch_id)`` returned True for the first time in this execution's run:
    later replays see the marker and take the new branch again."""

    event_type: ClassVar[str] = PATCH_RECORDED

    command_id: str
    patch_id: str

    def event_payload(self) -> dict[str, Any]:
        return {"command_id": self.command_id, "patch_id": self.patch_id}


@dataclass(frozen=True)
class StartChild:
    """Start child execution ``child_id`` of workflow ``name@version`` with ``input``.

    The runtime inserts the child with the ``ChildStarted`` event, in one transaction, and
    dedupes on ``child_id``: a pass retried after a crash never starts a second child.
    """

    event_type: ClassVar[str] = CHILD_STARTED

    command_id: str
    name: str
    version: str
    input: Any
    child_id: str
    parent_close_policy: str

    def event_payload(self) -> dict[str, Any]:
        return {
            "command_id": self.command_id,
            "name": self.name,
            "version": self.version,
            "input": self.input,
            "child_id": self.child_id,
            "parent_close_policy": self.parent_close_policy,
        }


@dataclass(frozen=True)
class CompleteUpdate:
    """The outcome of accepted update ``update_id``: the handler's ``result``, or ``error``.

    ``handled`` is False when the workflow ended before its code reached the update (then
    ``error`` says so). Replay runs the handler again to rebuild the state, but the
    recorded outcome is what callers get: it is never recorded twice.
    """

    event_type: ClassVar[str] = UPDATE_COMPLETED

    update_id: str
    result: Any = None
    error: str | None = None
    handled: bool = True

    @property
    def command_id(self) -> str:
        return f"update:{self.update_id}"

    def event_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"update_id": self.update_id}
        if self.error is None:
            payload["result"] = self.result
        else:
            payload["error"] = self.error
        if not self.handled:
            payload["handled"] = False
        return payload


Command: TypeAlias = (
    ScheduleOperation | StartTimer | RecordSelect | RecordPatch | StartChild | CompleteUpdate
)


# -- outcomes of one pass ------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    """The function returned ``result``. ``commands`` were issued before it returned."""

    event_type: ClassVar[str] = WORKFLOW_COMPLETED

    result: Any
    commands: list[Command] = field(default_factory=list)

    def event_payload(self) -> dict[str, Any]:
        return {"result": self.result}


@dataclass(frozen=True)
class Failed:
    """The function raised; ``reason`` is ``"<ExceptionType>: <message>"``."""

    event_type: ClassVar[str] = WORKFLOW_FAILED

    reason: str
    commands: list[Command] = field(default_factory=list)

    def event_payload(self) -> dict[str, Any]:
        return {"reason": self.reason}


@dataclass(frozen=True)
class ContinuedAsNew:
    """The function called ``ctx.continue_as_new(input)``: this run ends, and the execution
    goes on in a fresh run started with ``input``. ``carried`` are the seqs of this run's
    ``SignalReceived`` events the code has not consumed, which the new run receives again
    (see :func:`headgate_django.kernel.replay_runs.carried_signals`)."""

    event_type: ClassVar[str] = WORKFLOW_CONTINUED_AS_NEW

    input: Any
    carried: tuple[int, ...] = ()
    commands: list[Command] = field(default_factory=list)

    def event_payload(self) -> dict[str, Any]:
        return {"input": self.input, "carried_signals": list(self.carried)}


@dataclass(frozen=True)
class Parked:
    """The function waits for facts not yet in history.

    ``wake_at_ms`` is the earliest ``fire_at_ms`` among this pass's unfired timers (None when
    only an Operation or a signal can wake it); ``waiting_on`` names what the code blocked on,
    and ``select`` the select that blocked (None: a ``result()``/``exception()`` call).
    """

    commands: list[Command]
    wake_at_ms: int | None
    waiting_on: tuple[str, ...] = ()
    #: For operators only (the console shows it), so not part of the outcome's identity.
    select: str | None = field(default=None, compare=False)

    def waiting(self) -> dict[str, Any]:
        """What the runtime keeps on the header for operators: ``{"select", "futures"}``."""
        return {"select": self.select, "futures": list(self.waiting_on)}


@dataclass(frozen=True)
class Nondeterministic:
    """The code does not match the history (or the history is corrupt); nothing is recorded."""

    error: NondeterminismError


Outcome: TypeAlias = Completed | Failed | ContinuedAsNew | Parked | Nondeterministic


# -- the history index ---------------------------------------------------------------


@dataclass
class HistoryIndex:
    """A validated history, indexed by command identity (built once per pass)."""

    started: Event
    last: Event
    #: command_id -> the event its command produced (OperationScheduled, TimerScheduled,
    #: SelectResolved), and those ids in seq order for error messages.
    commands: dict[str, Event] = field(default_factory=dict)
    command_order: list[str] = field(default_factory=list)
    #: command_id -> the fact that settled it (OperationCompleted/Failed, TimerFired,
    #: ChildCompleted/Failed).
    facts: dict[str, Event] = field(default_factory=dict)
    uncertain: set[str] = field(default_factory=set)
    #: signal name -> its SignalReceived events in seq order.
    signals: dict[str, list[Event]] = field(default_factory=dict)
    #: update_id -> its UpdateAccepted (in seq order), and -> its UpdateCompleted.
    updates: dict[str, Event] = field(default_factory=dict)
    update_results: dict[str, Event] = field(default_factory=dict)
    terminal: Event | None = None


def index_history(history: Iterable[Event]) -> HistoryIndex:
    """Validate ``history`` (contiguous seqs from 1, known types, well-formed payloads, facts
    only for scheduled commands) and index it. Raises :class:`HistoryCorruptError`."""
    events = iter(history)
    first = next(events, None)
    if first is None:
        raise HistoryCorruptError("The history is empty: it must start with WorkflowStarted.")
    if first.type != WORKFLOW_STARTED or first.seq != 1 or not isinstance(first.payload, dict):
        raise HistoryCorruptError(
            f"The history must start with WorkflowStarted at seq 1, not {first.type} at "
            f"seq {first.seq}."
        )
    index = HistoryIndex(started=first, last=first)
    for event in events:
        if event.seq != index.last.seq + 1:
            raise HistoryCorruptError(
                f"History seqs must be contiguous: seq {event.seq} follows seq {index.last.seq}."
            )
        if not isinstance(event.payload, dict):
            raise _corrupt(event, "its payload is not an object")
        handler = _HANDLERS.get(event.type)
        if handler is None:
            raise _corrupt(event, "the event type is unknown")
        handler(index, event)
        index.last = event
    return index


def due_timers(history: Iterable[Event], now_ms: int) -> list[str]:
    """Command ids of timers whose ``fire_at_ms <= now_ms`` and that have not fired yet.

    The runtime appends ``TimerFired`` for each of them, before replaying, in the pass that
    reads ``now_ms`` from the store clock.
    """
    pending: dict[Any, Any] = {}
    for event in history:
        # Tolerant on purpose: a malformed history is reported by the replay that follows.
        payload = event.payload if isinstance(event.payload, dict) else {}
        if event.type == TIMER_SCHEDULED:
            pending[payload.get("command_id")] = payload.get("fire_at_ms")
        elif event.type == TIMER_FIRED:
            pending.pop(payload.get("command_id"), None)
    return [
        cid
        for cid, fire_at_ms in pending.items()
        if isinstance(cid, str) and _is_int(fire_at_ms) and fire_at_ms <= now_ms
    ]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _corrupt(event: Event, why: str) -> HistoryCorruptError:
    return HistoryCorruptError(
        f"History event {event.seq} ({event.type}) is malformed: {why}.", seq=event.seq
    )


def _field(event: Event, key: str, kind: type, *, optional: bool = False) -> Any:
    """``payload[key]``, checked to be a ``kind`` (a required string must not be empty)."""
    if key not in event.payload:
        if optional:
            return None
        raise _corrupt(event, f"payload lacks {key!r}")
    value = event.payload[key]
    wrong = not _is_int(value) if kind is int else not isinstance(value, kind)
    if wrong or (kind is str and not optional and not value):
        raise _corrupt(
            event,
            f"{key!r} must be a {'non-empty ' if kind is str else ''}"
            f"{kind.__name__}, not {value!r}",
        )
    return value


def _command_id(event: Event, prefix: str) -> str:
    cid = _field(event, "command_id", str)
    if not cid.startswith(prefix):
        raise _corrupt(event, f"command_id {cid!r} does not start with {prefix!r}")
    return str(cid)


def _add_command(index: HistoryIndex, event: Event, prefix: str) -> str:
    cid = _command_id(event, prefix)
    if cid in index.commands:
        raise _corrupt(event, f"{cid} was already recorded at seq {index.commands[cid].seq}")
    index.commands[cid] = event
    index.command_order.append(cid)
    return cid


def _scheduled(index: HistoryIndex, event: Event, prefix: str) -> str:
    """The id of the command this fact settles, which must be recorded and not settled."""
    cid = _command_id(event, prefix)
    if cid not in index.commands:
        raise _corrupt(event, f"{cid} was never scheduled")
    if cid in index.facts:
        raise _corrupt(event, f"{cid} was already settled at seq {index.facts[cid].seq}")
    return cid


def _on_operation_scheduled(index: HistoryIndex, event: Event) -> None:
    _add_target(index, event, OP_PREFIX)


def _on_operation_settled(index: HistoryIndex, event: Event) -> None:
    _settle(index, event, OP_PREFIX, failed=(OPERATION_FAILED, "error"))


def _add_target(index: HistoryIndex, event: Event, prefix: str) -> None:
    """A started Operation or child: it names its ``name`` and ``version``."""
    _field(event, "name", str)
    _field(event, "version", str)
    _add_command(index, event, prefix)


def _settle(index: HistoryIndex, event: Event, prefix: str, failed: tuple[str, str]) -> None:
    """The outcome of a started Operation or child; a failure may say why in its field."""
    if event.type == failed[0]:
        _field(event, failed[1], str, optional=True)
    index.facts[_scheduled(index, event, prefix)] = event


def _on_operation_uncertain(index: HistoryIndex, event: Event) -> None:
    index.uncertain.add(_scheduled(index, event, OP_PREFIX))


def _on_uncertain_resolved(index: HistoryIndex, event: Event) -> None:
    cid = _scheduled(index, event, OP_PREFIX)
    if cid not in index.uncertain:
        raise _corrupt(event, f"{cid} was never uncertain")
    if _field(event, "decision", str) not in UNCERTAIN_DECISIONS:
        raise _corrupt(event, f"decision must be one of {sorted(UNCERTAIN_DECISIONS)}")
    index.uncertain.discard(cid)


def _on_timer_scheduled(index: HistoryIndex, event: Event) -> None:
    if _field(event, "duration_ms", int) < 0:
        raise _corrupt(event, "duration_ms is negative")
    _field(event, "fire_at_ms", int)
    _add_command(index, event, TIMER_PREFIX)


def _on_timer_fired(index: HistoryIndex, event: Event) -> None:
    index.facts[_scheduled(index, event, TIMER_PREFIX)] = event


def _on_signal_received(index: HistoryIndex, event: Event) -> None:
    index.signals.setdefault(_field(event, "name", str), []).append(event)


def _on_select_resolved(index: HistoryIndex, event: Event) -> None:
    futures = _field(event, "futures", list)
    chosen = _field(event, "index", int)
    if not futures or not all(isinstance(f, str) for f in futures):
        raise _corrupt(event, "futures must be a non-empty list of command ids")
    if not 0 <= chosen < len(futures):
        raise _corrupt(event, f"index {chosen} is outside the {len(futures)} futures")
    _add_command(index, event, SELECT_PREFIX)


def _on_patch_recorded(index: HistoryIndex, event: Event) -> None:
    cid = _add_command(index, event, PATCH_PREFIX)
    if cid != f"{PATCH_PREFIX}{_field(event, 'patch_id', str)}":
        raise _corrupt(event, f"command_id {cid!r} does not name its patch_id")


def _on_child_started(index: HistoryIndex, event: Event) -> None:
    _field(event, "child_id", str)
    _add_target(index, event, CHILD_PREFIX)


def _on_child_settled(index: HistoryIndex, event: Event) -> None:
    _settle(index, event, CHILD_PREFIX, failed=(CHILD_FAILED, "reason"))


def _on_update_accepted(index: HistoryIndex, event: Event) -> None:
    update_id = _field(event, "update_id", str)
    _field(event, "name", str)
    if update_id in index.updates:
        raise _corrupt(event, f"update {update_id!r} was already accepted")
    index.updates[update_id] = event


def _on_update_completed(index: HistoryIndex, event: Event) -> None:
    update_id = _field(event, "update_id", str)
    if update_id not in index.updates:
        raise _corrupt(event, f"update {update_id!r} was never accepted")
    if update_id in index.update_results:
        raise _corrupt(event, f"update {update_id!r} already completed")
    _field(event, "error", str, optional=True)
    index.update_results[update_id] = event


def _on_terminal(index: HistoryIndex, event: Event) -> None:
    if index.terminal is not None:
        raise _corrupt(event, f"the workflow already ended at seq {index.terminal.seq}")
    index.terminal = event


def _on_started_again(index: HistoryIndex, event: Event) -> None:
    raise _corrupt(event, "WorkflowStarted may only be the first event")


def _ignore(index: HistoryIndex, event: Event) -> None:
    """Audit events carry no decision."""


_HANDLERS = {
    WORKFLOW_STARTED: _on_started_again,
    OPERATION_SCHEDULED: _on_operation_scheduled,
    OPERATION_COMPLETED: _on_operation_settled,
    OPERATION_FAILED: _on_operation_settled,
    OPERATION_UNCERTAIN: _on_operation_uncertain,
    OPERATION_UNCERTAIN_RESOLVED: _on_uncertain_resolved,
    TIMER_SCHEDULED: _on_timer_scheduled,
    TIMER_FIRED: _on_timer_fired,
    SIGNAL_RECEIVED: _on_signal_received,
    SELECT_RESOLVED: _on_select_resolved,
    CHILD_STARTED: _on_child_started,
    CHILD_COMPLETED: _on_child_settled,
    CHILD_FAILED: _on_child_settled,
    UPDATE_ACCEPTED: _on_update_accepted,
    UPDATE_COMPLETED: _on_update_completed,
    WORKFLOW_COMPLETED: _on_terminal,
    WORKFLOW_FAILED: _on_terminal,
    WORKFLOW_CANCELLED: _on_terminal,
    WORKFLOW_CONTINUED_AS_NEW: _on_terminal,
    PATCH_RECORDED: _on_patch_recorded,
    WORKFLOW_SUSPENDED: _ignore,
    WORKFLOW_RESUMED: _ignore,
}


# -- history export (JSON) -----------------------------------------------------------


@dataclass(frozen=True)
class HistoryExport:
    """One execution's history as exported for the replay checker and golden tests."""

    name: str
    version: str
    workflow_id: str
    input: Any
    events: list[Event]
    run_id: str | None = None


def history_to_json(
    events: Iterable[Event],
    *,
    name: str,
    version: str,
    workflow_id: str,
    input: Any,
    run_id: str | None = None,
    indent: int | None = 2,
) -> str:
    """Export a history as ``{"workflow": {name, version, id, input[, run_id]}, "events":
    [{seq, type, payload, at_ms}, ...]}``. ``run_id`` is written only when it differs from
    the workflow id (the first run of an execution has the execution's id)."""
    workflow: dict[str, Any] = {"name": name, "version": version, "id": workflow_id}
    workflow["input"] = input
    if run_id is not None and run_id != workflow_id:
        workflow["run_id"] = run_id
    document = {"workflow": workflow, "events": [event.to_dict() for event in events]}
    return json.dumps(document, indent=indent, ensure_ascii=False)


def history_from_json(data: str | bytes | Mapping[str, Any]) -> HistoryExport:
    """Read an export written by :func:`history_to_json` (or by hand for a golden test).

    Raises :class:`HistoryCorruptError` on anything malformed; the events are not replayed
    here, so :func:`index_history` still validates their order and payloads.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise HistoryCorruptError(f"The history export is not valid JSON: {exc}") from exc
        except RecursionError:
            raise HistoryCorruptError("The history export is nested too deeply to read.") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("workflow"), Mapping):
        raise HistoryCorruptError("A history export needs a 'workflow' object.")
    workflow, events = data["workflow"], data.get("events")
    for key in ("name", "version", "id"):
        if not isinstance(workflow.get(key), str) or not workflow[key]:
            raise HistoryCorruptError(f"The export's workflow.{key} must be a non-empty string.")
    if "input" not in workflow:
        raise HistoryCorruptError("The export's workflow object lacks 'input'.")
    if not isinstance(events, list):
        raise HistoryCorruptError("A history export needs an 'events' list.")
    run_id = workflow.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        raise HistoryCorruptError("The export's workflow.run_id must be a string.")
    return HistoryExport(
        name=workflow["name"],
        version=workflow["version"],
        workflow_id=workflow["id"],
        input=workflow["input"],
        events=[Event.from_dict(item) for item in events],
        run_id=run_id,
    )

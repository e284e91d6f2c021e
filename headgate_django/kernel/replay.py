"""Deterministic replay of durable workflow code over its history (pure: no Django, no I/O).

A workflow function ``fn(ctx, input)`` is run again from the top on every pass. Every
primitive call gets a *command identity* from a per-pass counter for its kind, and is matched
by that identity to the events it produced in earlier passes, never by position in history:

- Operations ``op:1``, ``op:2``, … (``execute_operation`` and ``start_operation`` share one count);
- timers ``timer:1``, …; selects ``select:1``, …; child executions ``child:1``, …;
- signal waits ``signal:<name>:1``, … per name (not recorded: the k-th wait for a name is
  bound to the k-th ``SignalReceived`` of that name, whenever it arrived);
- patch markers ``patch:<change id>`` (keyed by the change id, recorded once).

``continue_as_new``, ``patched`` and ``deprecate_patch`` are explained in
:mod:`headgate_django.kernel.replay_runs` (which signals a new run receives again, and when
a patch takes the new branch).

Logical time (why replay cannot drift)
--------------------------------------
The engine keeps a *position*: the seq of the newest fact the code has waited for, starting at
WorkflowStarted. A future is ``ready`` when its fact's seq is at or before the position.
``result()``/``exception()`` on a future whose fact lies later moves the position there (the
code "waited" for it); with no fact in history the pass parks. ``select`` returns the first
future ready at the position in argument order; if none is, it moves to the earliest fact
among them, and parks when none has one. Facts are only ever appended with larger seqs, so
every decision made against the position comes out the same on every later replay: a late
signal cannot flip an earlier select (azync hazard 2), and an unfired losing timer is simply
never consulted again (hazard 1). Selects are also recorded (``SelectResolved``) so replay
proves the decision and catches reordered arguments. The code behaves as if each pass ran the
instant its awaited fact was appended: what it does depends on the order of events, never on
how late a worker got to them. One consequence: a signal delivered before anything was waited
for is not ``ready`` yet — ``select`` on it (that waits up to it) rather than poll ``ready``.

``ctx.now()`` is the store time (``at_ms``) of the event at the position — WorkflowStarted's
time until the code first waits — so it is identical on every replay and never reads a worker
clock. ``ctx.random()`` and ``ctx.uuid4()`` draw from two streams seeded with WorkflowStarted's
``payload["seed"]`` (the run id when absent). New timers fire at ``max(now_ms, ctx.now()) +
duration``, where ``now_ms`` is the store clock the runtime read for this pass; replays use the
recorded ``fire_at_ms``.

Nondeterminism: a recorded command whose name/version (Operation, child), duration (timer) or futures
and index (select) differ from the call; a new command issued while a recorded one is still
unmatched; a recorded command the code never issues by the end of the pass (a patch marker
included, unless ``deprecate_patch`` accepts it); a recorded WorkflowCompleted/WorkflowFailed/
WorkflowContinuedAsNew the code no longer reaches. Each is reported as
``Nondeterministic(NondeterminismError)`` naming the command id and both values; a malformed
history as its subclass ``HistoryCorruptError``. Operation inputs are not compared: they are
stored as JSON (a tuple comes back a list) and fixing how an input is shaped must not strand
in-flight runs.

Runtime contract
----------------
Event types, commands, outcomes and :func:`due_timers` live in
:mod:`headgate_django.kernel.replay_events`. Every event: ``seq`` contiguous from 1 per
execution, ``at_ms`` = the store clock at append. ``history[0]`` is ``WorkflowStarted
{"input": <input>, "seed": <str, optional>}`` (a run started by continue-as-new also names
the run before it, ``"continued_from"``); pass the same ``input`` on every pass, and the
current run's ``run_id`` (Operation execution keys are ``<run_id>:<command id>``).

One pass, holding the execution's lock (at most one pass per execution at a time):

1. Read ``now_ms`` from the store clock and the whole history.
2. Append ``TimerFired {"command_id"}`` for each id in ``due_timers(history, now_ms)``.
3. ``outcome = replay(fn, input, history, workflow_id=…, run_id=…, now_ms=now_ms)`` over the
   history including those TimerFired events.
4. For each command in ``outcome.commands`` (Parked, Completed and Failed all carry them),
   in order, append ``command.event_type`` with ``command.event_payload()``, and:

   ===================  ============================================  ============================
   command              event payload                                 side effect
   ===================  ============================================  ============================
   ScheduleOperation    OperationScheduled {command_id, name,         enqueue the Operation job,
                        version, input, execution_key}                deduped by execution_key
   StartTimer           TimerScheduled {command_id, duration_ms,      none (see wake_at_ms)
                        fire_at_ms}
   RecordSelect         SelectResolved {command_id, index, futures}   none
   RecordPatch          PatchRecorded {command_id, patch_id}          none
   StartChild           ChildStarted {command_id, name, version,      insert the child execution,
                        input, child_id, parent_close_policy}         deduped by child_id
   CompleteUpdate       UpdateCompleted {update_id, result | error}   none (the caller polls it)
   ===================  ============================================  ============================

5. ``Completed`` → append ``WorkflowCompleted {"result"}``; ``Failed`` → ``WorkflowFailed
   {"reason"}`` (use ``outcome.event_type``/``event_payload()``), and end the execution.
   ``ContinuedAsNew`` → append ``WorkflowContinuedAsNew {"input", "carried_signals"}``, end
   the run and, in the same transaction, start the next one: a fresh history whose
   ``WorkflowStarted`` has the new input, followed by the carried ``SignalReceived`` events.
   (Its commands include the ``CompleteUpdate`` of each update the run never reached.)
   Then apply the ended run's live children's close policies, before the next run's pass.
   ``Parked`` → schedule a wake pass at ``wake_at_ms`` when it is not None.
   ``Nondeterministic`` → append nothing; back off, then suspend with ``str(error)``.
   Steps 2–5 commit in one transaction. Facts appended by others in between are harmless
   (matching is by id, not position), but two passes of one execution must never overlap:
   both would append the same command ids. A pass retried after a crash re-issues the same
   commands with the same execution keys, so enqueueing an Operation must dedupe on it.

External facts — append, then wake a pass (``execution_key`` = the ScheduleOperation's):

- Operation succeeded (or was skipped): ``OperationCompleted {command_id, result}`` (result
  absent/None for a skip). At most one of Completed/Failed per command id: dedupe on it.
- Operation failed for good: ``OperationFailed {command_id, error: str}``.
- Operation uncertain: ``OperationUncertain {command_id, reason}``; suspend, no wake. The
  future stays unready, so a pass parks on it.
- ``resolve_uncertain``, atomically with the job change: ``OperationUncertainResolved
  {command_id, decision: "complete"|"fail"|"retry"}``, then for complete
  ``OperationCompleted {command_id, result}``, for fail ``OperationFailed {command_id,
  error}``; for retry nothing more (the re-run settles as above).
- Timer due: ``TimerFired {command_id}`` via step 2 of the pass woken at ``wake_at_ms``.
  Losing timers fire too; that is harmless.
- Signal delivered: ``SignalReceived {name, payload, message_id?}`` (after inbox dedupe).
  Signals nobody waits for stay buffered; they are never "unconsumed history".
- Child ended: ``ChildCompleted {command_id, child_id, result}`` or ``ChildFailed
  {command_id, child_id, state, reason}`` (failed, cancelled, or could not start), appended
  to the parent in the transaction that ends the child; one per child (fact key: its id).
  Only the run that started the child gets it: command ids restart with every run.
- Update accepted (its validator passed on a read-only replay up to the last seq):
  ``UpdateAccepted {update_id, name, payload}``, appended only if history has not moved
  since. Its handler runs where the code waits (:mod:`.replay_updates`).
- Cancel: ``WorkflowCancelled {reason?}``. Suspend/resume may append ``WorkflowSuspended`` /
  ``WorkflowResumed`` (audit only). Events after a terminal event are allowed and ignored.
"""

from __future__ import annotations

import copy
import inspect
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from headgate_django.exceptions import (
    ChildFailedError,
    HandlerCommandError,
    NondeterminismError,
    OperationFailedError,
    exception_reason,
)
from headgate_django.kernel.backoff import MAX_WAIT
from headgate_django.kernel.names import check_not_reserved
from headgate_django.kernel.replay_events import (
    CHILD_COMPLETED,
    CHILD_FAILED,
    CHILD_PREFIX,
    CHILD_STARTED,
    CODE_ENDINGS,
    OP_PREFIX,
    OPERATION_COMPLETED,
    OPERATION_FAILED,
    OPERATION_SCHEDULED,
    PARENT_CLOSE_POLICIES,
    PATCH_RECORDED,
    SELECT_PREFIX,
    SIGNAL_PREFIX,
    SIGNAL_RECEIVED,
    TIMER_PREFIX,
    TIMER_SCHEDULED,
    WORKFLOW_COMPLETED,
    WORKFLOW_CONTINUED_AS_NEW,
    Command,
    Completed,
    ContinuedAsNew,
    Event,
    Failed,
    HistoryIndex,
    Nondeterministic,
    Outcome,
    Parked,
    RecordSelect,
    ScheduleOperation,
    StartChild,
    StartTimer,
    index_history,
)
from headgate_django.kernel.replay_runs import carried_signals, patch_answer, patch_deprecated
from headgate_django.kernel.replay_updates import CONTINUED_FIRST, UpdateHandler, UpdateQueue

__all__ = [
    "ChildCheck",
    "ChildFuture",
    "Context",
    "Future",
    "ReplayUnwind",
    "WorkflowFunction",
    "check_history",
    "child_execution_id",
    "replay",
]

WorkflowFunction = Callable[["Context", Any], Any]
#: Called with each new child start before it is issued; raises (in the code) to refuse it.
ChildCheck = Callable[[StartChild], None]
#: The longest execution id the store keeps.
MAX_EXECUTION_ID = 200

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


class ReplayUnwind(BaseException):
    """Unwinds workflow code when the pass must stop (parked, or diverged from history).

    It derives from BaseException so ``except Exception`` in workflow code cannot swallow it.
    Even code that catches it cannot resume the pass: the pass is already marked stopped, and
    every later primitive call raises it again.
    """


class _Pass:
    """The state of one replay pass: position, clock, counters, matched and new commands."""

    def __init__(
        self,
        index: HistoryIndex,
        *,
        workflow_id: str,
        run_id: str,
        now_ms: int,
        check_child: ChildCheck | None = None,
        updates: Mapping[str, UpdateHandler] | None = None,
    ) -> None:
        self.index = index
        self.check_child = check_child
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.now_ms = now_ms
        self.pos = index.started.seq
        self.clock_ms = index.started.at_ms
        self.counters: dict[str, int] = {}
        self.matched: set[str] = set()
        self.commands: list[Command] = []
        self.timers: dict[str, int] = {}  # timer command id -> fire_at_ms, for wake_at_ms
        self.waiting_on: tuple[str, ...] | None = None
        self.parked_select: str | None = None
        self.continued: ContinuedAsNew | None = None
        self.patches: dict[str, bool] = {}
        self.error: NondeterminismError | None = None
        self.closed = False
        seed = index.started.payload.get("seed")
        self.seed = seed if isinstance(seed, str) and seed else run_id
        self.rngs: dict[str, random.Random] = {}
        self.state: dict[str, Any] = {}  # what query and update handlers read (ctx.state)
        self.updates = UpdateQueue(index, updates or {})
        #: A query's replay: new commands are dropped, so nothing can be recorded.
        self.read_only = False
        self.in_handler = False

    def guard(self) -> None:
        if self.closed:
            raise RuntimeError("This workflow Context belongs to a replay pass that has ended.")
        if self.waiting_on is not None or self.error is not None or self.continued is not None:
            raise ReplayUnwind()

    def no_handler(self) -> None:
        if self.in_handler:
            raise HandlerCommandError()

    def next_id(self, prefix: str) -> str:
        self.no_handler()
        count = self.counters.get(prefix, 0) + 1
        self.counters[prefix] = count
        return f"{prefix}{count}"

    def park(self, waiting_on: tuple[str, ...], select: str | None = None) -> NoReturn:
        self.no_handler()
        self.updates.run_before(self, None)  # they arrive while the code waits
        self.waiting_on = waiting_on
        self.parked_select = select
        raise ReplayUnwind()

    def diverge(self, message: str, **details: Any) -> NoReturn:
        self.error = NondeterminismError(message, **details)
        raise ReplayUnwind()

    def match(self, cid: str) -> Event | None:
        """The recorded event of command ``cid``, or None when it is new in this pass.

        A new command while recorded ones are still unmatched means the code took a different
        path than the one recorded (unchanged code issues every recorded command first).
        """
        recorded = self.index.commands.get(cid)
        if recorded is not None:
            self.matched.add(cid)
            return recorded
        expected = self.first_unmatched()
        if expected is not None:
            self.diverge(
                f"{cid}: the code issues a new command while history still expects "
                f"{_describe(expected)}, which the code has not issued.",
                command_id=cid,
                expected=expected.payload.get("command_id"),
            )
        return None

    def first_unmatched(self) -> Event | None:
        if len(self.matched) == len(self.index.commands):  # O(1) on the usual path
            return None
        cid = next(c for c in self.index.command_order if c not in self.matched)
        return self.index.commands[cid]

    def emit_command(self, command: Command) -> None:
        if self.read_only:
            return  # a query's replay is refused every new command: it records nothing
        self.commands.append(command)

    def advance(self, fact: Event) -> None:
        if fact.seq > self.pos:
            self.no_handler()
            self.updates.run_before(self, fact.seq)  # accepted while the code waited
            self.pos = fact.seq
            self.clock_ms = max(self.clock_ms, fact.at_ms)

    def wake_at_ms(self) -> int | None:
        unfired = [at for cid, at in self.timers.items() if cid not in self.index.facts]
        return min(unfired, default=None)

    def run_handler(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """``(True, fn(ctx, *args))``, or ``(False, reason)`` when it raised: a query's,
        validator's or update's handler, which may read and change ``ctx.state`` only."""
        self.in_handler = True
        try:
            return True, fn(Context(self), *args)
        except Exception as exc:  # the handler's failure is data, like the workflow's
            return False, exception_reason(exc)
        finally:
            self.in_handler = False

    def rng(self, stream: str) -> random.Random:
        # A str seed is hashed with SHA-512, so the stream is the same in every process.
        if stream not in self.rngs:
            self.rngs[stream] = random.Random(f"{self.seed}:{stream}")
        return self.rngs[stream]


def _describe(event: Event) -> str:
    """A recorded command event, for error messages."""
    payload = event.payload
    if event.type == OPERATION_SCHEDULED:
        what = f"name={payload['name']!r}, version={payload['version']!r}"
    elif event.type == TIMER_SCHEDULED:
        what = f"duration_ms={payload['duration_ms']}"
    elif event.type == PATCH_RECORDED:
        what = f"patch_id={payload['patch_id']!r}"
    elif event.type == CHILD_STARTED:
        what = f"name={payload['name']!r}, version={payload['version']!r}"
    else:
        what = f"index={payload['index']}, futures={payload['futures']}"
    return f"{payload['command_id']} ({event.type}({what}) at seq {event.seq})"


class Future:
    """The eventual outcome of one primitive call, bound to its own history fact by identity.

    ``ready`` answers at the pass's logical position (see the module docstring), so branching
    on it is deterministic. ``result()`` and ``exception()`` park the pass until it settles.
    """

    __slots__ = ("_fact", "_label", "_pass", "command_id")

    def __init__(self, pass_: _Pass, command_id: str, fact: Event | None, label: str) -> None:
        self._pass = pass_
        self.command_id = command_id
        self._fact = fact
        self._label = label

    def __repr__(self) -> str:
        return f"<Future {self.command_id} {self._label}>"

    @property
    def ready(self) -> bool:
        self._pass.guard()
        return self._fact is not None and self._fact.seq <= self._pass.pos

    def result(self) -> Any:
        """The value: the Operation's or child's result, the signal's payload, or None for a
        timer.

        Raises :class:`OperationFailedError` when the Operation failed and
        :class:`ChildFailedError` when the child did not succeed.
        """
        fact = self._settle()
        if fact.type in (OPERATION_FAILED, CHILD_FAILED):
            raise self._failure(fact)
        if fact.type in (OPERATION_COMPLETED, CHILD_COMPLETED):
            return copy.deepcopy(fact.payload.get("result"))
        if fact.type == SIGNAL_RECEIVED:
            return copy.deepcopy(fact.payload.get("payload"))
        return None

    def exception(self) -> OperationFailedError | ChildFailedError | None:
        """The Operation's or child's failure, or None; parks like ``result()`` so it is
        deterministic."""
        fact = self._settle()
        return self._failure(fact) if fact.type in (OPERATION_FAILED, CHILD_FAILED) else None

    def _settle(self) -> Event:
        self._pass.guard()
        fact = self._fact
        if fact is None:
            self._pass.park((self.command_id,))
        self._pass.advance(fact)
        return fact

    def _failure(self, fact: Event) -> OperationFailedError | ChildFailedError:
        if fact.type == CHILD_FAILED:
            child_id, reason = fact.payload["child_id"], fact.payload.get("reason") or "failed"
            state = str(fact.payload.get("state") or "failed")
            return ChildFailedError(
                f"child {child_id} ({self._label}) is {state}: {reason}",
                child_id=child_id,
                reason=reason,
                state=state,
                command_id=self.command_id,
                seq=fact.seq,
            )
        message = fact.payload.get("error") or "operation failed"
        return OperationFailedError(
            message, command_id=self.command_id, operation=self._label, seq=fact.seq
        )


class ChildFuture(Future):
    """The handle of a child execution: ``child_id`` names it, ``result()`` waits for it."""

    __slots__ = ("child_id",)

    def __init__(
        self, pass_: _Pass, command_id: str, fact: Event | None, label: str, child_id: str
    ):
        super().__init__(pass_, command_id, fact, label)
        self.child_id = child_id


class Context:
    """What a workflow function receives: its only door to effects, time and randomness.

    Everything here is recomputed from history on every pass, so the function must reach the
    outside world only through these methods (I/O belongs in Operations).
    """

    __slots__ = ("_pass",)

    def __init__(self, pass_: _Pass) -> None:
        self._pass = pass_

    @property
    def workflow_id(self) -> str:
        return self._pass.workflow_id

    @property
    def run_id(self) -> str:
        return self._pass.run_id

    @property
    def state(self) -> dict[str, Any]:
        """What the code keeps for its query and update handlers: a dict rebuilt by every
        replay (so anything may go in it; query results must be JSON)."""
        return self._pass.state

    def execute_operation(self, name: str, version: str, input: Any = None) -> Future:
        """Schedule Operation ``name@version`` (or replay it) and park until it settles."""
        future = self.start_operation(name, version, input)
        future._settle()
        return future

    def start_operation(self, name: str, version: str, input: Any = None) -> Future:
        """Schedule Operation ``name@version`` without waiting; several may run at once."""
        p = self._pass
        p.guard()
        _check_name("operation name", name)
        _check_name("operation version", version)
        cid = p.next_id(OP_PREFIX)
        recorded = p.match(cid)
        if recorded is None:
            p.emit_command(ScheduleOperation(cid, name, version, input, f"{p.run_id}:{cid}"))
        else:
            _same_target(p, cid, recorded, "schedules Operation", name, version)
        return Future(p, cid, p.index.facts.get(cid), f"operation {name}@{version}")

    def start_child(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str,
        key: str | None = None,
        parent_close_policy: str = "terminate",
    ) -> ChildFuture:
        """Start child execution of workflow ``workflow@version`` (or replay its start)
        without waiting; ``result()`` on the handle waits for the child's result.

        The child's id is ``key`` when given, else derived from this run and the command
        id, so a re-run never starts a second child. ``parent_close_policy`` says what
        becomes of the child if it is still live when this execution finishes:
        ``terminate`` (cancel it), ``abandon`` (let it run) or ``request_cancel`` (send it
        the cancel-requested signal and let it finish by itself). A ``key`` starting with
        ``sched:`` raises ``ReservedIdError``, as every caller-chosen id does; a derived id
        may (the children of an execution a schedule started).
        """
        p = self._pass
        p.guard()
        _check_name("workflow name", workflow)
        _check_name("workflow version", version)
        if key is not None:
            _check_name("child key", key)
        if parent_close_policy not in PARENT_CLOSE_POLICIES:
            raise ValueError(
                f"parent_close_policy must be one of {', '.join(PARENT_CLOSE_POLICIES)}, "
                f"not {parent_close_policy!r}"
            )
        cid = p.next_id(CHILD_PREFIX)
        recorded = p.match(cid)
        label = f"workflow {workflow}@{version}"
        if recorded is None:
            if key is not None:  # checked only for a new start: a recorded one replays as it was
                check_not_reserved("child key", key)
            child_id = child_execution_id(p.run_id, cid, key)
            command = StartChild(cid, workflow, version, input, child_id, parent_close_policy)
            if p.check_child is not None:
                p.check_child(command)
            p.emit_command(command)
        else:
            _same_target(p, cid, recorded, "starts child workflow", workflow, version)
            child_id = recorded.payload["child_id"]
        return ChildFuture(p, cid, p.index.facts.get(cid), label, child_id)

    def child(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: str,
        key: str | None = None,
        parent_close_policy: str = "terminate",
    ) -> Any:
        """Start a child execution and wait for it: its result, or ``ChildFailedError``."""
        handle = self.start_child(
            workflow, input, version=version, key=key, parent_close_policy=parent_close_policy
        )
        return handle.result()

    def sleep(self, duration: timedelta) -> Future:
        """Start a durable timer; the Future is ready once it fired. Never parks by itself."""
        p = self._pass
        p.guard()
        if not isinstance(duration, timedelta):
            raise TypeError(f"sleep() takes a timedelta, not {type(duration).__name__}")
        if duration < timedelta(0):
            raise ValueError(f"sleep() needs a non-negative duration, not {duration}")
        if duration > MAX_WAIT:
            raise ValueError(f"sleep() takes at most {MAX_WAIT.days} days, not {duration}")
        duration_ms = duration // _MS
        cid = p.next_id(TIMER_PREFIX)
        recorded = p.match(cid)
        if recorded is None:
            fire_at_ms = max(p.now_ms, p.clock_ms) + duration_ms
            p.emit_command(StartTimer(cid, duration_ms, fire_at_ms))
        elif recorded.payload["duration_ms"] != duration_ms:
            p.diverge(
                f"{cid}: the code sleeps {duration_ms} ms, but history has {_describe(recorded)}.",
                command_id=cid,
                expected=recorded.payload["duration_ms"],
                actual=duration_ms,
            )
        else:
            fire_at_ms = recorded.payload["fire_at_ms"]
        p.timers[cid] = fire_at_ms
        return Future(p, cid, p.index.facts.get(cid), f"timer {duration_ms} ms")

    def wait_signal(self, name: str) -> Future:
        """The next signal ``name`` for this code path: the k-th call gets the k-th delivery.

        A future keeps its signal even if it loses a select; to wait again after a timeout,
        select on the same future again rather than calling ``wait_signal`` anew.
        """
        p = self._pass
        p.guard()
        _check_name("signal name", name)
        cid = p.next_id(f"{SIGNAL_PREFIX}{name}:")
        received = p.index.signals.get(name, [])
        ordinal = p.counters[f"{SIGNAL_PREFIX}{name}:"]
        fact = received[ordinal - 1] if ordinal <= len(received) else None
        return Future(p, cid, fact, f"signal {name!r}")

    def select(self, *futures: Future) -> int:
        """The index of the first ready future in argument order; parks while none is."""
        p = self._pass
        p.guard()
        if not futures:
            raise ValueError("select() needs at least one future")
        if not all(isinstance(f, Future) and f._pass is p for f in futures):
            raise TypeError("select() takes Futures made by this workflow's Context")
        cid = p.next_id(SELECT_PREFIX)
        ids = tuple(f.command_id for f in futures)
        chosen = _decide(futures, p.pos)
        if chosen is None:
            recorded = p.index.commands.get(cid)
            if recorded is not None:
                p.diverge(
                    f"{cid}: the code waits on {list(ids)}, none of which has settled, but "
                    f"history has {_describe(recorded)}.",
                    command_id=cid,
                )
            p.park(ids, select=cid)
        recorded = p.match(cid)
        if recorded is None:
            p.emit_command(RecordSelect(cid, chosen, ids))
        else:
            _check_select(p, recorded, ids, chosen)
        fact = futures[chosen]._fact
        assert fact is not None  # _decide only chooses settled futures
        p.advance(fact)
        return chosen

    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this run and go on as a fresh run of the same execution, started with
        ``input`` (JSON). It does not return: like returning, it ends the pass. Signals this
        run has not consumed are delivered again to the new run (see
        :mod:`headgate_django.kernel.replay_runs`)."""
        p = self._pass
        p.guard()
        carried = carried_signals(p.index, p.counters, p.pos)
        p.continued = ContinuedAsNew(copy.deepcopy(input), carried, p.commands)
        raise ReplayUnwind()

    def patched(self, change_id: str) -> bool:
        """True when this execution may take the new branch of change ``change_id``: a new
        execution, or a replay whose history recorded the marker here. False for a history
        that went past this point before the change existed (run the old branch)."""
        self._pass.guard()
        _check_name("change id", change_id)
        return patch_answer(self._pass, change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """The cleanup step after ``patched(change_id)``: the code keeps only the new branch
        and accepts histories with or without the marker."""
        self._pass.guard()
        _check_name("change id", change_id)
        patch_deprecated(self._pass, change_id)

    def now(self) -> datetime:
        """The store time of the newest fact the code has waited for (UTC)."""
        self._pass.guard()
        return _EPOCH + timedelta(milliseconds=self._pass.clock_ms)

    def random(self) -> float:
        """A float in [0, 1), the same on every replay of this execution."""
        self._pass.guard()
        return self._pass.rng("random").random()

    def uuid4(self) -> uuid.UUID:
        """A version-4 UUID, the same on every replay of this execution."""
        self._pass.guard()
        return uuid.UUID(int=self._pass.rng("uuid4").getrandbits(128), version=4)


def _same_target(p: _Pass, cid: str, recorded: Event, does: str, name: str, version: str) -> None:
    """A recorded Operation or child start must name what the code names now: a changed
    name or version is nondeterminism (inputs are not compared, see the module doc)."""
    if (recorded.payload["name"], recorded.payload["version"]) != (name, version):
        p.diverge(
            f"{cid}: the code {does} {name!r} version {version!r}, but history has "
            f"{_describe(recorded)}.",
            command_id=cid,
            expected=f"{recorded.payload['name']}@{recorded.payload['version']}",
            actual=f"{name}@{version}",
        )


def _check_name(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"The {what} must be a non-empty string, not {value!r}")


def child_execution_id(run_id: str, command_id: str, key: str | None = None) -> str:
    """The id of the child that command ``command_id`` of run ``run_id`` starts: ``key``
    when given, else ``<run>:<command>`` (hashed when that would be over the id limit)."""
    if key is not None:
        return key
    derived = f"{run_id}:{command_id}"
    if len(derived) <= MAX_EXECUTION_ID:
        return derived
    digest = uuid.uuid5(uuid.NAMESPACE_URL, derived).hex  # a name hash: the same everywhere
    return f"{run_id[: MAX_EXECUTION_ID - len(command_id) - 35]}~{digest}:{command_id}"


def _decide(futures: tuple[Future, ...], pos: int) -> int | None:
    """First future settled at ``pos``; else the one whose fact came first; else None."""
    earliest: int | None = None
    for i, future in enumerate(futures):
        fact = future._fact
        if fact is None:
            continue
        if fact.seq <= pos:
            return i
        if earliest is None or fact.seq < _seq(futures[earliest]):
            earliest = i
    return earliest


def _seq(future: Future) -> int:
    return future._fact.seq if future._fact is not None else 0


def _check_select(p: _Pass, recorded: Event, ids: tuple[str, ...], chosen: int) -> None:
    cid = recorded.payload["command_id"]
    if tuple(recorded.payload["futures"]) != ids:
        p.diverge(
            f"{cid}: the code selects over {list(ids)}, but history has {_describe(recorded)}.",
            command_id=cid,
            expected=recorded.payload["futures"],
            actual=list(ids),
        )
    if recorded.payload["index"] != chosen:
        p.diverge(
            f"{cid}: the code resolves to index {chosen} ({ids[chosen]}), but history has "
            f"{_describe(recorded)}.",
            command_id=cid,
            expected=recorded.payload["index"],
            actual=chosen,
        )


# -- the entry points ------------------------------------------------------------------


def replay(
    fn: WorkflowFunction,
    input: Any,
    history: Iterable[Event],
    *,
    workflow_id: str,
    run_id: str | None = None,
    now_ms: int | None = None,
    check_child: ChildCheck | None = None,
    updates: Mapping[str, UpdateHandler] | None = None,
) -> Outcome:
    """Run ``fn(ctx, input)`` against ``history`` once and say what happened.

    ``now_ms`` is the store clock read for this pass (it only dates new timers); it defaults
    to the last event's ``at_ms``. ``check_child`` vets each new child start (the runtime
    refuses unknown workflows and oversized inputs there, where the code can see it).
    ``updates`` maps update names to their handlers (see
    :mod:`headgate_django.kernel.replay_updates`). Never raises because of workflow code:
    its exceptions become ``Failed``; only those that are not an ``Exception``
    (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, …) propagate, and the
    runtime retries such a pass as crashed.
    """
    p = open_pass(
        history,
        workflow_id=workflow_id,
        run_id=run_id,
        now_ms=now_ms,
        check_child=check_child,
        updates=updates,
    )
    if isinstance(p, Nondeterministic):
        return p
    return run_pass(fn, input, p)


def open_pass(
    history: Iterable[Event],
    *,
    workflow_id: str,
    run_id: str | None = None,
    now_ms: int | None = None,
    check_child: ChildCheck | None = None,
    updates: Mapping[str, UpdateHandler] | None = None,
) -> _Pass | Nondeterministic:
    """A pass over ``history``, or why the history cannot be replayed."""
    try:
        index = index_history(history)
    except NondeterminismError as corrupt:
        return Nondeterministic(corrupt)
    return _Pass(
        index,
        workflow_id=workflow_id,
        run_id=run_id or workflow_id,
        now_ms=index.last.at_ms if now_ms is None else now_ms,
        check_child=check_child,
        updates=updates,
    )


def run_pass(fn: WorkflowFunction, input: Any, p: _Pass) -> Outcome:
    """Run the workflow code through pass ``p`` and check it against history."""
    ran = _run(fn, input, p)
    if p.error is not None:
        return Nondeterministic(p.error)
    outcome = (
        ran
        if p.waiting_on is None
        else Parked(p.commands, p.wake_at_ms(), p.waiting_on, p.parked_select)
    )
    # At the end of the run, the pass records the updates the code never reached (in
    # outcome.commands): a new run does not inherit them.
    ended = None
    if isinstance(outcome, Completed | Failed):
        ended = p.updates.finish(p)
    elif isinstance(outcome, ContinuedAsNew):
        ended = p.updates.finish(p, CONTINUED_FIRST)
    mismatch = ended or _unissued(p, outcome) or _ending_changed(p, outcome)
    return outcome if mismatch is None else Nondeterministic(mismatch)


def check_history(
    fn: WorkflowFunction,
    input: Any,
    history: Iterable[Event],
    *,
    workflow_id: str = "",
    run_id: str | None = None,
    updates: Mapping[str, UpdateHandler] | None = None,
) -> NondeterminismError | None:
    """The nondeterminism replaying ``history`` with ``fn`` reveals, or None if it matches.

    For the replay checker and golden-history tests: run new code against exported histories
    before deploying it.
    """
    outcome = replay(fn, input, history, workflow_id=workflow_id, run_id=run_id, updates=updates)
    return outcome.error if isinstance(outcome, Nondeterministic) else None


def _run(fn: WorkflowFunction, input: Any, p: _Pass) -> Outcome:
    try:
        result = fn(Context(p), input)
    except ReplayUnwind:
        if p.continued is not None:
            return p.continued
        return Failed("ReplayUnwind: raised by workflow code", p.commands)
    except Exception as exc:  # a user failure is data, not a crash of the pass
        return Failed(exception_reason(exc), p.commands)
    finally:
        p.closed = True
    if inspect.iscoroutine(result):
        result.close()  # never awaited: close it so no RuntimeWarning leaks
        return Failed("TypeError: a workflow function must not be async", p.commands)
    if p.continued is not None:  # the code swallowed the unwind: it still ended the run
        return p.continued
    return Completed(result, p.commands)


def _how(outcome: Outcome) -> str:
    if isinstance(outcome, Completed):
        return "returns"
    if isinstance(outcome, Failed):
        return f"fails with {outcome.reason!r}"
    if isinstance(outcome, ContinuedAsNew):
        return "continues as new"
    if isinstance(outcome, Parked):
        return f"parks waiting on {list(outcome.waiting_on)}"
    return "diverges"


def _unissued(p: _Pass, outcome: Outcome) -> NondeterminismError | None:
    """A recorded command the code no longer issues (history left unconsumed)."""
    expected = p.first_unmatched()
    if expected is None:
        return None
    cid = expected.payload["command_id"]
    return NondeterminismError(
        f"{cid}: history has {_describe(expected)}, but the code {_how(outcome)} without "
        f"issuing it.",
        command_id=cid,
    )


def _ending_changed(p: _Pass, outcome: Outcome) -> NondeterminismError | None:
    """A recorded ending (completed, failed, continued as new) the code no longer reaches
    the same way."""
    end = p.index.terminal
    if end is None or end.type not in CODE_ENDINGS:
        return None
    wanted: type[Completed | Failed | ContinuedAsNew] = {
        WORKFLOW_COMPLETED: Completed,
        WORKFLOW_CONTINUED_AS_NEW: ContinuedAsNew,
    }.get(end.type, Failed)
    if not isinstance(outcome, wanted) or isinstance(outcome, Parked | Nondeterministic):
        return NondeterminismError(
            f"History records {end.type} at seq {end.seq}, but the code now {_how(outcome)}.",
            expected=end.type,
        )
    if outcome.commands:
        cid = outcome.commands[0].command_id
        return NondeterminismError(
            f"{cid}: history ends with {end.type} at seq {end.seq}, but the code now issues "
            f"{cid} before ending.",
            command_id=cid,
        )
    return None

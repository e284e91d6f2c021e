"""Where in a replayed workflow its accepted updates run (pure: no Django, no I/O).

An update is recorded as ``UpdateAccepted {update_id, name, payload}`` when its validator
passed, and its handler's outcome as ``UpdateCompleted {update_id, result | error}`` by the
pass that first ran it. The handler changes ``ctx.state`` and returns a value; it runs
again on every replay, so the state is rebuilt, while the recorded outcome is what callers
get (it is never recorded twice, nor compared with a re-run's value).

Ordering rule (why replay cannot drift)
---------------------------------------
Workflow code moves through history only where it waits (``result()``, ``exception()``,
``select``; see :mod:`headgate_django.kernel.replay`). An update is handled *while the code
waits*: when a wait moves the position to a fact at seq ``s``, every accepted update with a
seq below ``s`` that has not run yet runs first, in seq order; when a wait parks (no fact
yet), every accepted update that has not run yet runs then. Code that does not wait (a
future already ready, a ``select`` settled at the position) handles none. Both decisions
depend only on the order of events in history, so every replay runs each handler at the
same point of the code, with the same state, and the code sees its changes when its wait
returns. An update accepted after the fact that unblocked the code, on a path where the
code then ends without waiting again, is never handled: the pass records it as
``UpdateCompleted {update_id, error, handled: false}``. The end of a run by
``continue_as_new`` counts as an end: its unhandled updates are recorded the same way (with
:data:`CONTINUED_FIRST`) in the run that accepted them, and the next run starts with none.

Nondeterminism: an accepted update whose name the workflow has no handler for, and an
update recorded as handled that the code now ends before reaching.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol

from headgate_django.exceptions import NondeterminismError
from headgate_django.kernel.replay_events import Command, CompleteUpdate, Event, HistoryIndex

#: ``handler(ctx, payload) -> result``; the ``ctx`` is the workflow's own Context.
UpdateHandler = Callable[[Any, Any], Any]

ENDED_FIRST = "the workflow ended before it handled this update"
#: The run ended by ``ctx.continue_as_new`` first: the next run does not inherit updates.
CONTINUED_FIRST = "the run continued as new before it handled this update"


class _Pass(Protocol):
    read_only: bool

    def emit_command(self, command: Command) -> None: ...

    def diverge(self, message: str, **details: Any) -> NoReturn: ...

    def run_handler(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]: ...


class UpdateQueue:
    """The accepted updates of one pass, run in seq order as the code waits."""

    def __init__(self, index: HistoryIndex, handlers: Mapping[str, UpdateHandler]) -> None:
        self.accepted = list(index.updates.values())
        self.recorded = index.update_results
        self.handlers = handlers
        self.ran = 0  # accepted[:ran] have run in this pass

    def run_before(self, p: _Pass, seq: int | None) -> None:
        """Run every update accepted below ``seq`` (every one, for None) not yet run."""
        while self.ran < len(self.accepted):
            event = self.accepted[self.ran]
            if seq is not None and event.seq >= seq:
                return
            self.ran += 1
            self._run(p, event)

    def _run(self, p: _Pass, event: Event) -> None:
        update_id, name = event.payload["update_id"], event.payload["name"]
        handler = self.handlers.get(name)
        if handler is None:
            p.diverge(
                f"update {update_id!r}: history has UpdateAccepted(name={name!r}) at seq "
                f"{event.seq}, but the workflow has no update handler {name!r}.",
                update_id=update_id,
                expected=name,
            )
        ok, value = p.run_handler(handler, event.payload.get("payload"))
        if p.read_only or update_id in self.recorded:
            return
        if ok:
            try:
                # A snapshot: code that runs later in the pass may change what it points to.
                value = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                ok, value = False, f"TypeError: the update's result is not JSON: {exc}"
        command = (
            CompleteUpdate(update_id, result=value)
            if ok
            else CompleteUpdate(update_id, error=value)
        )
        p.emit_command(command)

    def finish(self, p: _Pass, reason: str = ENDED_FIRST) -> NondeterminismError | None:
        """At the run's end: record the updates its code never reached (failed with
        ``reason``), or report one that history says it handled."""
        for event in self.accepted[self.ran :]:
            update_id = event.payload["update_id"]
            recorded = self.recorded.get(update_id)
            if recorded is None:
                if not p.read_only:
                    p.emit_command(CompleteUpdate(update_id, error=reason, handled=False))
            elif recorded.payload.get("handled", True) is not False:
                return NondeterminismError(
                    f"update {update_id!r}: history records its handler's outcome at seq "
                    f"{recorded.seq}, but the code now ends before handling it.",
                    update_id=update_id,
                )
        return None

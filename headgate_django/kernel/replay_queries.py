"""Queries and update validators: read a workflow's state by replay, recording nothing.

A query replays the execution's committed history with the workflow code, read-only:
the code runs as on a pass, through every fact history holds, until it waits for one
history does not have yet, or ends. Each command it issues that history does not have
yet is refused — dropped, never returned — so nothing the replay does can reach history.
The handler then reads ``ctx.state`` as the code left it: the state as of the last
committed event. A handler that tries to issue a command itself (an Operation, a timer,
a signal wait, a select, a wait on a future) is refused with
:class:`~headgate_django.exceptions.HandlerCommandError`, which fails the query. Accepted updates are applied
where the code waits, exactly as on a pass (:mod:`headgate_django.kernel.replay_updates`),
so a query sees their effect once the code has handled them.

An update's validator runs the same way, with the update's payload as its argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headgate_django.kernel.replay import WorkflowFunction, open_pass, run_pass
from headgate_django.kernel.replay_events import Event, Nondeterministic
from headgate_django.kernel.replay_updates import UpdateHandler


@dataclass(frozen=True)
class Answered:
    """The handler returned ``result``; ``as_of_seq`` is the last event replayed."""

    result: Any
    as_of_seq: int


@dataclass(frozen=True)
class Raised:
    """The handler raised; ``reason`` is ``"<ExceptionType>: <message>"``."""

    reason: str
    as_of_seq: int


def run_query(
    fn: WorkflowFunction,
    input: Any,
    history: Iterable[Event],
    handler: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    workflow_id: str,
    run_id: str | None = None,
    updates: Mapping[str, UpdateHandler] | None = None,
) -> Answered | Raised | Nondeterministic:
    """Replay ``history`` read-only, then call ``handler(ctx, *args)`` on the state the
    code left. Never raises because of workflow or handler code."""
    p = open_pass(history, workflow_id=workflow_id, run_id=run_id, updates=updates)
    if isinstance(p, Nondeterministic):
        return p
    p.read_only = True
    outcome = run_pass(fn, input, p)
    if isinstance(outcome, Nondeterministic):
        return outcome
    # The pass ended (parked, or the code returned): reopen its context for the handler,
    # at the position the code reached.
    p.closed, p.waiting_on = False, None
    try:
        ok, value = p.run_handler(handler, *args)
    finally:
        p.closed = True
    seq = p.index.last.seq
    return Answered(value, seq) if ok else Raised(value, seq)

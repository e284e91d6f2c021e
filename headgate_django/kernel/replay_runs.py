"""Runs and patches: the two ways workflow code changes shape without a new version.

Pure, like the rest of the replay engine; :mod:`headgate_django.kernel.replay` calls these
from ``Context.continue_as_new``, ``Context.patched`` and ``Context.deprecate_patch``.

Continue-as-new
---------------
``continue_as_new(input)`` ends the run like a completion (recorded as
``WorkflowContinuedAsNew``), and the runtime starts the next run of the same execution with
``input`` and a fresh history in the same transaction. A signal is **consumed** by the run
when the code holds it: the k-th ``wait_signal(name)`` of the final pass is bound to the k-th
``SignalReceived`` of that name (the binding rule of the engine), *and* that event's seq is at
or before the pass's logical position when ``continue_as_new`` was called (its future was
``ready`` there). Every other ``SignalReceived`` of the run — never waited for, or bound to a
future that had not settled at that point — is **carried over**: the new run's history
receives it again, in the original order, right after its ``WorkflowStarted``, so the new
run's first ``wait_signal(name)`` gets the oldest unconsumed signal of that name.

Patches
-------
``patched(change_id)`` asks "may this execution take the new branch here?". It is True when
the history records the marker ``patch:<change_id>`` (an earlier pass took the new branch),
and when the code is past the end of its recorded history (nothing recorded is left to
match, and the run has not ended): new decisions are being made, so the new branch is taken
and the marker is recorded. It is False while replaying a history that went past this point
without the marker: code that predates the patch made those decisions, so the old branch
must run again. The answer is memoised per change id for the pass. ``deprecate_patch`` is
the cleanup step: the code only has the new branch, and replays histories with the marker
(consuming it) or without it alike.
"""

from __future__ import annotations

from typing import Any

from headgate_django.kernel.replay_events import (
    CODE_ENDINGS,
    PATCH_PREFIX,
    SIGNAL_PREFIX,
    HistoryIndex,
    RecordPatch,
)

__all__ = ["carried_signals", "history_size_warning", "patch_answer", "patch_deprecated"]


def carried_signals(index: HistoryIndex, counters: dict[str, int], pos: int) -> tuple[int, ...]:
    """Seqs of the run's ``SignalReceived`` events the code has not consumed at ``pos``,
    given the pass's per-kind call ``counters`` (see the module docstring)."""
    carried: list[int] = []
    for name, received in index.signals.items():
        bound = counters.get(f"{SIGNAL_PREFIX}{name}:", 0)
        carried += [e.seq for i, e in enumerate(received) if i >= bound or e.seq > pos]
    return tuple(sorted(carried))


def patch_answer(p: Any, change_id: str) -> bool:
    """The answer of ``ctx.patched(change_id)`` in pass ``p``, recording a marker when it
    is True for the first time (see the module docstring)."""
    if change_id in p.patches:
        return bool(p.patches[change_id])
    cid = f"{PATCH_PREFIX}{change_id}"
    if cid in p.index.commands:
        p.match(cid)
        answer = True
    elif _replaying(p):
        answer = False
    else:
        p.emit_command(RecordPatch(cid, change_id))
        answer = True
    p.patches[change_id] = answer
    return answer


def patch_deprecated(p: Any, change_id: str) -> None:
    """``ctx.deprecate_patch(change_id)``: consume the marker if history has one; record
    nothing either way."""
    cid = f"{PATCH_PREFIX}{change_id}"
    if cid in p.index.commands:
        p.match(cid)
    p.patches[change_id] = True


def _replaying(p: Any) -> bool:
    """Whether recorded history goes on past this point: a recorded command not yet
    matched, or an ending the code has not reached yet."""
    terminal = p.index.terminal
    return p.first_unmatched() is not None or (
        terminal is not None and terminal.type in CODE_ENDINGS
    )


def history_size_warning(
    *, run_number: int, events: int, size: int, max_events: int, max_bytes: int
) -> str | None:
    """The warning for a run whose history has ``events`` events of ``size`` payload bytes,
    or None while it is within both thresholds."""
    if events <= max_events and size <= max_bytes:
        return None
    return (
        f"run {run_number} has {events} history events ({size} bytes), past the threshold of "
        f"{max_events} events or {max_bytes} bytes: every pass replays the whole run, so "
        "call ctx.continue_as_new(...) to go on in a fresh run"
    )

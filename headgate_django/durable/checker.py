"""The replay checker: replay exported histories against the current code before deploying.

``Manager.history()`` (and ``manage.py durable_replay``) use the JSON format of
:func:`headgate_django.kernel.replay_events.history_to_json`. A history that the current
code no longer reproduces raises :class:`NondeterminismError` naming the first mismatch —
the sign that a change needs a new workflow version instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from headgate_django.durable.registry import WorkflowDef, registered_workflows
from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.replay import check_history
from headgate_django.kernel.replay_events import HistoryExport, history_from_json


def replay(
    history_json: str | bytes | Mapping[str, Any],
    workflows: Iterable[WorkflowDef] | None = None,
) -> HistoryExport:
    """Replay one exported history with the matching workflow from ``workflows`` (default:
    every workflow registered in this process).

    Returns the parsed export when the code reproduces it; raises
    :class:`NondeterminismError` (``HistoryCorruptError`` for a malformed export) when it
    does not, and :class:`DefinitionError` when no workflow matches its (name, version).
    """
    export = history_from_json(history_json)
    candidates = list(registered_workflows() if workflows is None else workflows)
    for definition in candidates:
        if not isinstance(definition, WorkflowDef):
            raise DefinitionError(
                f"durable.replay takes @durable.workflow definitions, not {definition!r}"
            )
    match = next(
        (d for d in candidates if (d.name, d.version) == (export.name, export.version)), None
    )
    if match is None:
        raise DefinitionError(
            f"no workflow {export.name!r} version {export.version!r} among "
            f"{sorted({(d.name, d.version) for d in candidates})}"
        )
    error = check_history(
        match.fn,
        export.input,
        export.events,
        workflow_id=export.workflow_id,
        run_id=export.run_id,
        updates=match.update_handlers(),
    )
    if error is not None:
        raise error
    return export

"""Queries, and the read-only replay that queries and update validators share.

Both run the workflow's code in the *caller's* process (a web request, a script), so the
workflow must be registered there too. They read the header and the whole history in one
statement and take no lock: a worker's pass is never held up by a query, and a query sees
the history as of the last event committed when it read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from headgate_django.durable.registry import WorkflowDef, check_name, find_workflow
from headgate_django.envelope import check_payload, check_result
from headgate_django.exceptions import (
    DefinitionError,
    NotFoundError,
    QueryFailedError,
    ResultTooLargeError,
    UnknownHandlerError,
)
from headgate_django.kernel.replay_events import Event, Nondeterministic
from headgate_django.kernel.replay_queries import Answered, Raised, run_query
from headgate_django.store.durable import Header, execution_read

MAX_HANDLER_NAME = 128


@dataclass(frozen=True)
class Snapshot:
    """An execution's header and committed history, with the code registered for it here."""

    header: Header
    history: list[Event]
    definition: WorkflowDef

    def ask(self, handler: Callable[..., Any], args: Sequence[Any]) -> Answered | Raised:
        """Replay read-only, then run ``handler(ctx, *args)``; raises
        :class:`NondeterminismError` when the code no longer replays the history."""
        definition = self.definition
        outcome = run_query(
            definition.fn,
            self.header.input,
            self.history,
            handler,
            args,
            workflow_id=self.header.id,
            run_id=self.header.run_id,
            updates=definition.update_handlers(),
        )
        if isinstance(outcome, Nondeterministic):
            raise outcome.error
        return outcome


def snapshot(workflow_id: str, *, using: str = "default") -> Snapshot:
    read = execution_read(workflow_id, using=using)
    if read is None:
        raise NotFoundError(f"execution {workflow_id} does not exist", id=workflow_id)
    header, history = read
    definition = find_workflow(header.name, header.version)
    if definition is None:
        raise DefinitionError(
            f"workflow {header.name!r} version {header.version!r} is not registered in this "
            "process: queries and updates run its code where they are asked",
            workflow=header.name,
            version=header.version,
        )
    return Snapshot(header, history, definition)


def unknown(kind: str, name: str, definition: WorkflowDef, known: Sequence[str]) -> Exception:
    return UnknownHandlerError(
        f"workflow {definition.name!r} version {definition.version!r} has no {kind} {name!r}"
        + (f" (it has {', '.join(sorted(known))})" if known else ""),
        **{kind: name},
    )


def query(workflow_id: str, name: str, args: Sequence[Any], *, using: str = "default") -> Any:
    """The value query ``name`` returns for ``args`` on the execution's state now."""
    check_name("query name", name, MAX_HANDLER_NAME)
    check_payload(list(args), "query's arguments")
    snap = snapshot(workflow_id, using=using)
    definition = snap.definition.queries.get(name)
    if definition is None:
        raise unknown("query", name, snap.definition, list(snap.definition.queries))
    outcome = snap.ask(definition.fn, list(args))
    if isinstance(outcome, Raised):
        raise QueryFailedError(f"query {name!r} raised {outcome.reason}", query=name)
    try:
        check_result(outcome.result)
    except ResultTooLargeError:
        raise
    except (TypeError, ValueError) as exc:
        raise QueryFailedError(f"query {name!r} returned {exc}", query=name) from None
    return outcome.result

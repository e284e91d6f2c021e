"""Death handlers: a call, exactly once per archive, when a job will not run again by itself.

``@task(on_death=fn)`` (or ``HEADGATE["ON_DEATH"]`` for every kind without one of its own)
names ``fn(notice: DeathNotice)``. When a job is archived for good (out of attempts,
skipped, past its deadline) or found undecodable, the store's ``ON_ARCHIVE`` hook enqueues
an internal job (``headgate:death``) in the same transaction: the call cannot be lost to a
crash between the archive and the call, and it is not made for an archive that rolled
back. The internal job runs like any job (on the dead job's queue, with retries), so a
failing handler is retried rather than dropped. Internal kinds get no death handler, so a
death job's own archive calls nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils.module_loading import import_string

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope, encode_call, internal
from headgate_django.exceptions import ConfigurationError
from headgate_django.kernel.names import INTERNAL_PREFIX, is_internal_kind
from headgate_django.registry import find_task, internal_task
from headgate_django.store import hooks
from headgate_django.store.hooks import Death

log = logging.getLogger("headgate_django.deaths")

#: The kind of the internal job that makes one death handler call.
DEATH_KIND = f"{INTERNAL_PREFIX}death"
#: Why a job died, as ``DeathNotice.reason`` says it.
REASONS = ("attempts_exhausted", "skipped", "deadline_exceeded", "undecodable")


@dataclass(frozen=True)
class DeathNotice:
    """What a death handler is told: the job, why it died, and its last error."""

    job_id: str
    kind: str
    queue: str
    reason: str
    error: str


def global_handler() -> Callable[[DeathNotice], Any] | None:
    """``HEADGATE["ON_DEATH"]``: None, a callable, or the dotted path of one."""
    hook = headgate_settings.ON_DEATH
    if hook is None or callable(hook):
        return hook
    if not isinstance(hook, str):
        raise ConfigurationError(
            f"HEADGATE['ON_DEATH'] must be a callable or a dotted path, not {hook!r}"
        )
    try:
        found = import_string(hook)
    except ImportError as exc:
        raise ConfigurationError(
            f"HEADGATE['ON_DEATH'] = {hook!r} cannot be imported: {exc}"
        ) from None
    if not callable(found):
        raise ConfigurationError(f"HEADGATE['ON_DEATH'] = {hook!r} is not callable")
    return found  # type: ignore[no-any-return]


def handler_for(kind: str) -> Callable[[DeathNotice], Any] | None:
    """The death handler of ``kind``: its task's own, else the global one (internal kinds
    have none)."""
    if is_internal_kind(kind):
        return None
    return _own_handler(kind) or global_handler()


def _own_handler(kind: str) -> Callable[[DeathNotice], Any] | None:
    definition = find_task(kind)
    return None if definition is None else definition.on_death


def _on_archive(cursor: Any, conn: Any, deaths: list[Death]) -> None:
    """Enqueue one death job per death that has a handler, in the archive's transaction.

    A misconfigured global hook (``headgate.E030``) must not stop the archive itself: it is
    logged, and the death jobs of kinds with a handler of their own still go in."""
    from headgate_django.store.insert import _insert, _plan

    try:
        global_handler()
    except ConfigurationError as exc:
        log.error("death handlers of kinds without their own are off: %s", exc)
        deaths = [d for d in deaths if _own_handler(d.kind) is not None]
    envelopes = [
        internal(
            Envelope(
                kind=DEATH_KIND,
                queue=death.queue,
                payload=encode_call((), death._asdict()),
            )
        )
        for death in deaths
        if handler_for(death.kind) is not None
    ]
    if envelopes:
        _insert(conn, _plan(envelopes))


hooks.ON_ARCHIVE.append(_on_archive)


@internal_task(kind=DEATH_KIND)
def run_death_handler(ctx: Any, **death: str) -> None:
    """Call the dead job's handler (looked up now: a deploy may have changed it)."""
    notice = DeathNotice(**death)
    handler = handler_for(notice.kind)
    if handler is None:
        log.warning(
            "job %s (%s) died (%s) but no death handler is set now",
            notice.job_id,
            notice.kind,
            notice.reason,
        )
        return
    handler(notice)

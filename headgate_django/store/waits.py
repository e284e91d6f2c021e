"""What ``enqueue_and_wait`` needs from the store: flag a job as awaited, read its outcome,
and (PostgreSQL) hear when it finishes.

The flag makes migration 0021's trigger notify channel :data:`FINISHED_CHANNEL` with the
job's id when it reaches a terminal state or is deleted; no other job notifies anyone.
"""

from __future__ import annotations

import contextlib
import logging
import time
from types import TracebackType
from typing import Any, NamedTuple

from django.db import connections, transaction

from headgate_django.conf import headgate_settings
from headgate_django.envelope import Envelope
from headgate_django.kernel.states import TERMINAL_STATES, State
from headgate_django.models import Job

log = logging.getLogger("headgate_django.store")

FINISHED_CHANNEL = "headgate_finished"
_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)


class JobOutcome(NamedTuple):
    """A job's state, and once it is terminal its result and last error."""

    state: str  # a job state, or "deleted" when the row is gone
    result: Any = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in _TERMINAL or self.state == State.DELETED.value


def job_insert_awaited(envelope: Envelope, *, notify: bool, using: str = "default") -> str:
    """Insert one job in a transaction of its own and return its id; with ``notify``, flag
    it awaited in that transaction, before any worker can see it."""
    from headgate_django.store.insert import job_insert_many

    with transaction.atomic(using=using):
        [job_id] = job_insert_many([envelope], using=using)
        if notify:
            job_mark_awaited(job_id, using=using)
    return job_id


def job_mark_awaited(job_id: str, *, using: str = "default") -> None:
    """Flag the job as awaited (in the enqueue's transaction, before any worker sees it)."""
    Job.objects.using(using).filter(pk=job_id).update(awaited=True)


def job_outcome(job_id: str, *, using: str = "default") -> JobOutcome:
    """The job's state; its result and last error only once it has finished (a waiting
    job's errors are not read on every poll)."""
    rows = Job.objects.using(using).filter(pk=job_id)
    state = rows.values_list("state", flat=True).first()
    if state is None:
        return JobOutcome(State.DELETED.value)
    if state not in _TERMINAL:
        return JobOutcome(state)
    found = rows.values_list("state", "result", "errors").first()
    if found is None:  # evicted between the two reads
        return JobOutcome(State.DELETED.value)
    state, result, errors = found
    last = errors[-1] if isinstance(errors, list) and errors else None
    return JobOutcome(state, result, last.get("error") if isinstance(last, dict) else None)


class FinishedListener:
    """A PostgreSQL session of its own that ``LISTEN``s on :data:`FINISHED_CHANNEL` for one
    wait.

    Opened before the job is enqueued, so its finish cannot be missed for want of a
    listener; the caller still reads the job periodically (a notification is lost with the
    session). It is closed when the wait ends: a session kept for the next wait would hold
    the database open (a test database could not be dropped) and, idle, hold notifications
    it never reads.
    """

    def __init__(self, using: str = "default") -> None:
        import psycopg

        alias = headgate_settings.LISTEN_USING or using  # a pooler's bypass, if set
        self._conn = psycopg.connect(**connections[alias].get_connection_params(), autocommit=True)
        try:
            self._conn.execute(f"LISTEN {FINISHED_CHANNEL}")
        except Exception:
            self._conn.close()
            raise

    @staticmethod
    def supported(using: str = "default") -> bool:
        return connections[using].vendor == "postgresql"

    def wait(self, job_id: str, timeout: float) -> bool:
        """Up to ``timeout`` seconds for ``job_id``'s notification; whether it came. A broken
        session ends the listening (the caller's periodic reads go on)."""
        if self._conn.closed:
            time.sleep(timeout)
            return False
        try:
            return any(note.payload == job_id for note in self._conn.notifies(timeout=timeout))
        except Exception as exc:
            log.warning("LISTEN session for a job wait failed (%s); polling", exc)
            self.close()
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    def __enter__(self) -> FinishedListener:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

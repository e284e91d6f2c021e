"""The job state machine, as one table.

Every state change the store makes is one of these transitions; the store asks
:func:`next_state` instead of deciding on its own, so the rules live here only. The table
follows Headgate's conformance table: ``archived`` is the dead-letter state, terminal
states never move by themselves, and ``pending`` waits for an explicit promotion.
"""

from __future__ import annotations

from enum import StrEnum

from headgate_django.exceptions import InvalidTransitionError


class State(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    ARCHIVED = "archived"
    CANCELLED = "cancelled"
    QUARANTINED = "quarantined"
    UNDECODABLE = "undecodable"
    #: Pseudo-state: the row is removed (success with retention 0, revoke).
    DELETED = "deleted"


class Event(StrEnum):
    OPERATOR_PROMOTE = "operator_promote"
    SCHEDULE_DUE = "schedule_due"
    ADMITTED = "admitted"
    SUCCESS = "success"
    RETRY = "retry"
    SKIP = "skip"
    REVOKE = "revoke"
    SNOOZE = "snooze"
    UNDECODABLE = "undecodable"
    RELEASE = "release"  # graceful shutdown leftover: back to available, no counter moves
    LEASE_LOST = "lease_lost"
    BACKOFF_DUE = "backoff_due"
    OPERATOR_RETRY = "operator_retry"
    OPERATOR_RELEASE = "operator_release"
    OPERATOR_CANCEL = "operator_cancel"
    OPERATOR_SCHEDULE = "operator_schedule"  # pending/scheduled → scheduled (timers, reschedule)
    QUARANTINE = "quarantine"  # a waiting job whose fingerprint was just quarantined
    # A concurrency ceiling's on_saturated: the incoming job discarded or cancelled, or the
    # oldest running one cancelled to admit it.
    SATURATED = "saturated"
    # A waiting holder of a unique key takes a newer enqueue's values (unique_replace): the
    # run time only from scheduled, which may then be due.
    UNIQUE_REPLACE = "unique_replace"
    # A waiting holder of a debounced key takes a newer enqueue's payload and runs later.
    DEBOUNCE = "debounce"
    # The job's deadline passed before it finished: archived, never claimed again.
    DEADLINE = "deadline"


#: States a job can be in before it finishes; they hold a lifecycle unique key.
LIVE_STATES: frozenset[State] = frozenset(
    {State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RUNNING, State.RETRYABLE}
)
#: States that never move by themselves.
TERMINAL_STATES: frozenset[State] = frozenset(
    {State.COMPLETED, State.ARCHIVED, State.CANCELLED, State.QUARANTINED, State.UNDECODABLE}
)
#: Jobs waiting to run: a quarantined fingerprint moves these to ``quarantined``.
WAITING_STATES: frozenset[State] = frozenset(
    {State.PENDING, State.SCHEDULED, State.AVAILABLE, State.RETRYABLE}
)
#: Terminal states a retention sweep may evict (quarantined rows are kept for the operator).
EVICTABLE_STATES: frozenset[State] = frozenset(
    {State.COMPLETED, State.ARCHIVED, State.CANCELLED, State.UNDECODABLE}
)

_S, _E = State, Event

#: (from, event) → the possible targets. Where an event has two targets the choice
#: is made by a counter (see :func:`retry_target`, :func:`lease_lost_target`, :func:`success_target`).
TRANSITIONS: dict[tuple[State, Event], frozenset[State]] = {
    (_S.PENDING, _E.OPERATOR_PROMOTE): frozenset({_S.AVAILABLE}),
    (_S.PENDING, _E.OPERATOR_SCHEDULE): frozenset({_S.SCHEDULED}),
    (_S.SCHEDULED, _E.OPERATOR_SCHEDULE): frozenset({_S.SCHEDULED}),
    (_S.SCHEDULED, _E.OPERATOR_PROMOTE): frozenset({_S.AVAILABLE}),
    (_S.RETRYABLE, _E.OPERATOR_PROMOTE): frozenset({_S.AVAILABLE}),
    (_S.SCHEDULED, _E.SCHEDULE_DUE): frozenset({_S.AVAILABLE}),
    (_S.AVAILABLE, _E.ADMITTED): frozenset({_S.RUNNING}),
    (_S.RUNNING, _E.SUCCESS): frozenset({_S.COMPLETED, _S.DELETED}),
    (_S.RUNNING, _E.RETRY): frozenset({_S.RETRYABLE, _S.ARCHIVED}),
    (_S.RUNNING, _E.SKIP): frozenset({_S.ARCHIVED}),
    (_S.RUNNING, _E.REVOKE): frozenset({_S.DELETED}),
    (_S.RUNNING, _E.SNOOZE): frozenset({_S.SCHEDULED}),
    (_S.RUNNING, _E.UNDECODABLE): frozenset({_S.UNDECODABLE}),
    (_S.RUNNING, _E.RELEASE): frozenset({_S.AVAILABLE}),
    (_S.RUNNING, _E.LEASE_LOST): frozenset({_S.RETRYABLE, _S.QUARANTINED}),
    (_S.RETRYABLE, _E.BACKOFF_DUE): frozenset({_S.AVAILABLE}),
    (_S.ARCHIVED, _E.OPERATOR_RETRY): frozenset({_S.AVAILABLE}),
    (_S.CANCELLED, _E.OPERATOR_RETRY): frozenset({_S.AVAILABLE}),
    (_S.UNDECODABLE, _E.OPERATOR_RETRY): frozenset({_S.AVAILABLE}),
    (_S.QUARANTINED, _E.OPERATOR_RELEASE): frozenset({_S.AVAILABLE}),
    (_S.AVAILABLE, _E.OPERATOR_CANCEL): frozenset({_S.CANCELLED}),
    (_S.SCHEDULED, _E.OPERATOR_CANCEL): frozenset({_S.CANCELLED}),
    (_S.PENDING, _E.OPERATOR_CANCEL): frozenset({_S.CANCELLED}),
    (_S.RETRYABLE, _E.OPERATOR_CANCEL): frozenset({_S.CANCELLED}),
    (_S.RUNNING, _E.OPERATOR_CANCEL): frozenset({_S.CANCELLED}),
    (_S.PENDING, _E.QUARANTINE): frozenset({_S.QUARANTINED}),
    (_S.SCHEDULED, _E.QUARANTINE): frozenset({_S.QUARANTINED}),
    (_S.AVAILABLE, _E.QUARANTINE): frozenset({_S.QUARANTINED}),
    (_S.RETRYABLE, _E.QUARANTINE): frozenset({_S.QUARANTINED}),
    (_S.AVAILABLE, _E.SATURATED): frozenset({_S.ARCHIVED, _S.CANCELLED}),
    (_S.RUNNING, _E.SATURATED): frozenset({_S.CANCELLED}),
    (_S.SCHEDULED, _E.UNIQUE_REPLACE): frozenset({_S.SCHEDULED, _S.AVAILABLE}),
    (_S.AVAILABLE, _E.UNIQUE_REPLACE): frozenset({_S.AVAILABLE}),
    (_S.RETRYABLE, _E.UNIQUE_REPLACE): frozenset({_S.RETRYABLE}),
    (_S.SCHEDULED, _E.DEBOUNCE): frozenset({_S.SCHEDULED}),
    (_S.AVAILABLE, _E.DEBOUNCE): frozenset({_S.SCHEDULED}),
    (_S.RETRYABLE, _E.DEBOUNCE): frozenset({_S.RETRYABLE}),
    (_S.PENDING, _E.DEADLINE): frozenset({_S.ARCHIVED}),
    (_S.SCHEDULED, _E.DEADLINE): frozenset({_S.ARCHIVED}),
    (_S.AVAILABLE, _E.DEADLINE): frozenset({_S.ARCHIVED}),
    (_S.RETRYABLE, _E.DEADLINE): frozenset({_S.ARCHIVED}),
    (_S.RUNNING, _E.DEADLINE): frozenset({_S.ARCHIVED}),
}


def sources(event: Event) -> frozenset[State]:
    """The states from which ``event`` is allowed (used to build guarded UPDATEs)."""
    return frozenset(src for (src, ev) in TRANSITIONS if ev == event)


def check(state: State | str, event: Event) -> frozenset[State]:
    """Return the possible targets of ``event`` from ``state`` or refuse the transition."""
    targets = TRANSITIONS.get((State(state), event))
    if targets is None:
        raise InvalidTransitionError(
            f"a {State(state).value} job cannot take {event.value!r}",
            state=State(state).value,
            event=event.value,
        )
    return targets


def success_target(retention_ms: int) -> State:
    return State.COMPLETED if retention_ms > 0 else State.DELETED


def retry_target(attempt: int, max_attempts: int) -> State:
    """``attempt`` is the number of failed attempts before this one."""
    return State.RETRYABLE if attempt + 1 < max_attempts else State.ARCHIVED


def lease_lost_target(crash_attempt: int, crash_limit: int) -> State:
    """``crash_attempt`` is the number of crashes before this one."""
    return State.RETRYABLE if crash_attempt + 1 < crash_limit else State.QUARANTINED

"""The job state machine: every (state, event) pair of State × Event, and the counter rules.

The expected table is written out by hand, not derived from the code, so an edit to
``TRANSITIONS`` that nobody meant shows up here as a failing pair.
"""

from __future__ import annotations

import itertools

import pytest

from headgate_django.exceptions import InvalidTransitionError
from headgate_django.kernel.states import (
    EVICTABLE_STATES,
    LIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    WAITING_STATES,
    Event,
    State,
    check,
    lease_lost_target,
    retry_target,
    sources,
    success_target,
)

EXPECTED: dict[tuple[str, str], set[str]] = {
    ("pending", "operator_promote"): {"available"},
    ("pending", "operator_schedule"): {"scheduled"},
    ("pending", "operator_cancel"): {"cancelled"},
    ("pending", "quarantine"): {"quarantined"},
    ("scheduled", "operator_promote"): {"available"},
    ("scheduled", "operator_schedule"): {"scheduled"},
    ("scheduled", "schedule_due"): {"available"},
    ("scheduled", "operator_cancel"): {"cancelled"},
    ("scheduled", "quarantine"): {"quarantined"},
    ("available", "admitted"): {"running"},
    ("available", "operator_cancel"): {"cancelled"},
    ("available", "quarantine"): {"quarantined"},
    ("available", "saturated"): {"archived", "cancelled"},
    ("running", "success"): {"completed", "deleted"},
    ("running", "retry"): {"retryable", "archived"},
    ("running", "skip"): {"archived"},
    ("running", "revoke"): {"deleted"},
    ("running", "snooze"): {"scheduled"},
    ("running", "undecodable"): {"undecodable"},
    ("running", "release"): {"available"},
    ("running", "lease_lost"): {"retryable", "quarantined"},
    ("running", "operator_cancel"): {"cancelled"},
    ("running", "saturated"): {"cancelled"},
    ("retryable", "backoff_due"): {"available"},
    ("retryable", "operator_promote"): {"available"},
    ("retryable", "operator_cancel"): {"cancelled"},
    ("retryable", "quarantine"): {"quarantined"},
    ("archived", "operator_retry"): {"available"},
    ("cancelled", "operator_retry"): {"available"},
    ("undecodable", "operator_retry"): {"available"},
    ("quarantined", "operator_release"): {"available"},
    ("scheduled", "unique_replace"): {"scheduled", "available"},
    ("available", "unique_replace"): {"available"},
    ("retryable", "unique_replace"): {"retryable"},
    ("scheduled", "debounce"): {"scheduled"},
    ("available", "debounce"): {"scheduled"},
    ("retryable", "debounce"): {"retryable"},
    ("pending", "deadline"): {"archived"},
    ("scheduled", "deadline"): {"archived"},
    ("available", "deadline"): {"archived"},
    ("retryable", "deadline"): {"archived"},
    ("running", "deadline"): {"archived"},
}

ALL_PAIRS = list(itertools.product(State, Event))


def test_table_is_exactly_the_expected_table():
    actual = {
        (src.value, ev.value): {t.value for t in targets}
        for (src, ev), targets in TRANSITIONS.items()
    }
    assert actual == EXPECTED


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=lambda x: x.value)
def test_check_allows_table_pairs_and_refuses_the_rest(state: State, event: Event):
    expected = EXPECTED.get((state.value, event.value))
    if expected is None:
        with pytest.raises(InvalidTransitionError) as info:
            check(state, event)
        assert info.value.details == {"state": state.value, "event": event.value}
        assert state.value in str(info.value) and event.value in str(info.value)
    else:
        assert {t.value for t in check(state, event)} == expected


def test_check_accepts_the_stored_string_form():
    assert check("running", Event.SNOOZE) == {State.SCHEDULED}
    with pytest.raises(ValueError):
        check("no-such-state", Event.SNOOZE)


def test_the_deleted_pseudo_state_and_terminal_states_take_no_event_except_operators():
    for event in Event:
        with pytest.raises(InvalidTransitionError):
            check(State.DELETED, event)
    for state in TERMINAL_STATES:
        allowed = {ev for ev in Event if (state, ev) in TRANSITIONS}
        assert allowed <= {Event.OPERATOR_RETRY, Event.OPERATOR_RELEASE}, state
    assert {s for s in TERMINAL_STATES if (s, Event.OPERATOR_RETRY) in TRANSITIONS} == {
        State.ARCHIVED,
        State.CANCELLED,
        State.UNDECODABLE,
    }


def test_sources_of_each_event():
    assert sources(Event.OPERATOR_CANCEL) == LIVE_STATES
    assert sources(Event.QUARANTINE) == WAITING_STATES
    assert sources(Event.OPERATOR_PROMOTE) == {State.PENDING, State.SCHEDULED, State.RETRYABLE}
    assert sources(Event.OPERATOR_SCHEDULE) == {State.PENDING, State.SCHEDULED}
    assert sources(Event.LEASE_LOST) == {State.RUNNING}
    assert sources(Event.ADMITTED) == {State.AVAILABLE}


def test_state_groups():
    assert {"pending", "scheduled", "available", "running", "retryable"} == LIVE_STATES
    assert LIVE_STATES - {State.RUNNING} == WAITING_STATES
    assert {"completed", "archived", "cancelled", "quarantined", "undecodable"} == TERMINAL_STATES
    assert TERMINAL_STATES - {State.QUARANTINED} == EVICTABLE_STATES
    assert set(State) - {State.DELETED} == LIVE_STATES | TERMINAL_STATES


@pytest.mark.parametrize(
    ("retention_ms", "target"),
    [(0, State.DELETED), (-1, State.DELETED), (1, State.COMPLETED), (86_400_000, State.COMPLETED)],
)
def test_success_target(retention_ms: int, target: State):
    assert success_target(retention_ms) is target


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "target"),
    [
        (0, 1, State.ARCHIVED),  # the only attempt failed
        (0, 2, State.RETRYABLE),
        (1, 2, State.ARCHIVED),
        (23, 25, State.RETRYABLE),
        (24, 25, State.ARCHIVED),
        (30, 25, State.ARCHIVED),  # max_attempts lowered below the attempts already made
    ],
)
def test_retry_target(attempt: int, max_attempts: int, target: State):
    assert retry_target(attempt, max_attempts) is target


@pytest.mark.parametrize(
    ("crashes", "limit", "target"),
    [
        (0, 3, State.RETRYABLE),
        (1, 3, State.RETRYABLE),
        (2, 3, State.QUARANTINED),  # the third crash
        (5, 3, State.QUARANTINED),
        (0, 1, State.QUARANTINED),
    ],
)
def test_lease_lost_target(crashes: int, limit: int, target: State):
    assert lease_lost_target(crashes, limit) is target


def test_every_two_target_event_is_decided_by_a_helper_within_the_table():
    assert {retry_target(0, 2), retry_target(1, 2)} == check(State.RUNNING, Event.RETRY)
    assert {lease_lost_target(0, 3), lease_lost_target(2, 3)} == check(
        State.RUNNING, Event.LEASE_LOST
    )
    assert {success_target(0), success_target(1)} == check(State.RUNNING, Event.SUCCESS)

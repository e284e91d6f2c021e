"""The chaos invariants catch what they claim to: each pure check is fed an audit trail
with one violation planted (these run in the normal suite, without a database)."""

from __future__ import annotations

import json
from typing import Any

from tests.chaos.audit import Transition
from tests.chaos.invariants import (
    completed_once,
    crashes_match_faults,
    double_runs,
    reruns_logged,
    stale_writes,
)


def t(job: str, new: str, *, fence: int = 1, crash: int = 0, by: str = "w1", detail: Any = None):  # type: ignore[no-untyped-def]
    text = None if detail is None else json.dumps(detail)
    new_crash = crash + (new == "retryable" and by.startswith("killed"))
    return Transition(job, "chaos.job", "running", new, fence, crash, new_crash, by, text)


def test_a_second_completion_is_caught() -> None:
    trail = [t("a", "completed"), t("b", "completed"), t("a", "completed", fence=2)]
    assert completed_once(trail[:2]).ok
    check = completed_once(trail)
    assert not check.ok and "a ×2" in check.detail


def test_a_stale_progress_write_or_result_is_caught() -> None:
    good = [
        t("a", "progress", fence=3, detail={"message": "fence:3"}),
        t("a", "completed", fence=3, detail={"fence": 3}),
    ]
    assert stale_writes(good) == ([], 1)
    stale_progress = t("a", "progress", fence=4, detail={"message": "fence:3"})
    stale_result = t("b", "completed", fence=5, detail={"fence": 4})
    offenders, _ = stale_writes([*good, stale_progress, stale_result])
    assert len(offenders) == 2
    assert "landed under fence 4" in offenders[0] and "under fence 5" in offenders[1]


def test_crashes_must_be_the_faulted_workers_leases_and_all_the_killed_ones() -> None:
    trail = [t("a", "retryable", by="killed-1"), t("b", "completed", by="killed-1")]
    check, for_kills, _ = crashes_match_faults(trail, killed={"killed-1"}, held_at_kills=1)
    assert check.ok and for_kills == 1
    # A crash charged to a worker nobody killed or paused: the outage (or a bug) charged it.
    live = Transition("c", "chaos.job", "running", "retryable", 1, 0, 1, "w-live", None)
    check, _, _ = crashes_match_faults([*trail, live], killed={"killed-1"}, held_at_kills=2)
    assert not check.ok and "held by live w-live" in check.detail
    # A killed lease that was never charged.
    check, _, _ = crashes_match_faults(trail, killed={"killed-1"}, held_at_kills=2)
    assert not check.ok and "1 crashes charged for 2 leases killed" in check.detail
    # A paused worker's leases: at most once each.
    paused = [
        Transition(j, "chaos.job", "running", "retryable", 1, 0, 1, "p-1", None) for j in "de"
    ]
    check, _, for_pauses = crashes_match_faults(
        [*trail, *paused], killed={"killed-1"}, held_at_kills=1, paused={"p-1"}, held_at_pauses=2
    )
    assert check.ok and for_pauses == 2
    check, _, _ = crashes_match_faults(
        [*trail, *paused], killed={"killed-1"}, held_at_kills=1, paused={"p-1"}, held_at_pauses=1
    )
    assert not check.ok and "2 crashes charged for 1 leases paused" in check.detail


def test_a_fence_may_run_twice_only_in_one_process_that_logged_the_rerun() -> None:
    log = (
        "WARNING headgate_django.worker job a failed on a lost database connection; "
        "running it again on a new one\nWARNING claim failed (server closed); backing off\n"
    )
    reruns = reruns_logged([log, "nothing here"])
    assert reruns == {"a"}
    once = [("a", 1, 10), ("b", 1, 10), ("b", 2, 11)]
    assert double_runs(once, reruns) == []
    # The logged rerun: the same process ran fence 1 of job a twice.
    assert double_runs([*once, ("a", 1, 10)], reruns) == []
    # The same, unlogged.
    assert double_runs([*once, ("b", 2, 11)], reruns) == ["b ran 2 times under fence 2"]
    # Two processes under one fence: two live holders, logged rerun or not.
    assert double_runs([*once, ("a", 1, 12)], reruns) == ["a ran under fence 1 in 2 processes"]
    # A rerun happens once per attempt.
    assert double_runs([*once, ("a", 1, 10), ("a", 1, 10)], reruns) == [
        "a ran 3 times under fence 1"
    ]

"""A database outage is reported once, reminded every REMIND_EVERY seconds, and its end
said once: not a warning per failed call from each of a worker's threads."""

from __future__ import annotations

import logging

import pytest

from headgate_django.worker.outage import REMIND_EVERY, OutageLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_one_line_a_reminder_then_one_line_at_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = OutageLog(clock)
    caplog.set_level(logging.INFO, logger="headgate_django.worker")
    outage.succeeded()  # no outage: nothing to say
    for _ in range(50):  # many threads, many calls, a fraction of a second
        outage.failed("claim", OSError("refused"))
        clock.now += 0.01
    assert [r.getMessage() for r in caplog.records] == [
        "database unavailable (claim failed: refused); retrying"
    ]
    assert outage.down_for() == pytest.approx(0.5)
    clock.now = 100.0 + REMIND_EVERY + 1
    outage.failed("housekeeping", OSError("still refused"))
    outage.failed("housekeeping", OSError("still refused"))
    assert caplog.records[-1].getMessage() == (
        f"database still unavailable after {REMIND_EVERY + 1:.0f} s "
        "(51 failed calls; last: still refused)"
    )
    assert len(caplog.records) == 2
    clock.now += 9
    outage.succeeded()
    outage.succeeded()
    assert caplog.records[-1].getMessage() == (
        f"database available again after {REMIND_EVERY + 10:.1f} s (52 failed calls)"
    )
    assert len(caplog.records) == 3 and outage.down_for() == 0.0
    outage.failed("claim", OSError("again"))  # a new outage is reported afresh
    assert caplog.records[-1].getMessage() == "database unavailable (claim failed: again); retrying"

"""Live, gone or stopped from a heartbeat, and the zero-filled minute series: pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from headgate_django.kernel.workers import GONE_AFTER_BEATS, minute_series, worker_status

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BEAT = timedelta(seconds=5)


def status(age: timedelta, stopped: bool = False) -> str:
    return worker_status(now=NOW, last_heartbeat_at=NOW - age, heartbeat=BEAT, stopped=stopped)


def test_live_until_three_beats_are_missed_then_gone():
    assert status(timedelta(0)) == "live"
    assert status(BEAT * GONE_AFTER_BEATS) == "live"
    assert status(BEAT * GONE_AFTER_BEATS + timedelta(milliseconds=1)) == "gone"


def test_a_clean_stop_is_stopped_however_old():
    assert status(timedelta(0), stopped=True) == "stopped"
    assert status(timedelta(days=1), stopped=True) == "stopped"


def test_minute_series_fills_the_gaps_with_zeros():
    series = minute_series({10: (1, 2, 3), 12: (4, 0, 0)}, last_minute=12, minutes=4)
    assert series == [(9, 0, 0, 0), (10, 1, 2, 3), (11, 0, 0, 0), (12, 4, 0, 0)]

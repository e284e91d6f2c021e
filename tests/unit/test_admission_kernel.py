"""The pure arithmetic of admission: token buckets and policy validation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headgate_django.exceptions import DefinitionError
from headgate_django.kernel import admission as a


def test_refill_is_linear_and_capped_at_burst():
    assert a.refill(0.0, 10, 20, 1000, 100) == 2.0
    assert a.refill(0.0, 10, 20, 1000, 10_000) == 10.0
    assert a.refill(3.0, 10, 20, 1000, 0) == 3.0
    assert a.refill(3.0, 10, 20, 1000, -5) == 3.0  # a clock step back refills nothing


def test_refill_in_steps_equals_refill_at_once():
    once = a.refill(-4.0, 10, 7, 1000, 900)
    stepped = a.refill(
        a.refill(a.refill(-4.0, 10, 7, 1000, 300), 10, 7, 1000, 300), 10, 7, 1000, 300
    )
    assert once == pytest.approx(stepped)


def test_a_debt_is_paid_back_first():
    assert a.refill(-5.0, 10, 1, 1000, 2000) == -3.0


def test_spend_needed_and_wait():
    assert a.spend_needed(3, 10) == 3
    assert a.spend_needed(30, 10) == 10  # heavier than the bucket: waits for a full one
    assert a.ms_until(3.0, 2, 10, 20, 1000) == 0
    assert a.ms_until(0.0, 1, 10, 20, 1000) == 50
    assert a.ms_until(0.5, 1, 10, 20, 1000) == 25
    assert a.ms_until(-1.0, 1, 10, 1, 60_000) == 120_000


@pytest.mark.parametrize(
    ("limit", "window", "burst", "paused"),
    [
        (0, 1, None, False),
        (-1, 1, None, False),
        (1.5, 1, None, False),
        (True, 1, None, False),
        (1, 0, None, False),
        (1, -1, None, False),
        (1, timedelta(0), None, False),
        (1, "1s", None, False),
        (1, float("nan"), None, False),
        (1, 10**9, None, False),
        (1, 1, 0, False),
        (1, 1, -2, False),
        (1, 1, None, "yes"),
    ],
)
def test_bad_rate_class_values(limit, window, burst, paused):
    with pytest.raises(DefinitionError):
        a.validate_rate_class_config(limit, window, burst, paused)


def test_good_rate_class_values():
    assert a.validate_rate_class_config(20, 1, None, False) == (20, 1000, 20, False)
    assert a.validate_rate_class_config(5, timedelta(minutes=1), 9, True) == (5, 60_000, 9, True)
    assert a.validate_rate_class_config(1, 0.001, None, False) == (1, 1, 1, False)


@pytest.mark.parametrize(
    ("n", "strategy"), [(0, "queue"), (-3, "queue"), (2.0, "queue"), (3, "wait"), (3, "")]
)
def test_bad_concurrency_limits(n, strategy):
    with pytest.raises(DefinitionError):
        a.validate_concurrency_limit(n, strategy)

"""The pure rules of admission control: what a policy may say, checked before it is stored.

Validation lives here so the public functions, the settings' system checks and the API
refuse the same values with the same words; the store enforces what passed.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from headgate_django.exceptions import DefinitionError

#: What a claim does with a job whose partition has reached its queue's ceiling: leave it
#: waiting (``queue``), archive it (``discard``), cancel it (``cancel_incoming``), or cancel
#: the partition's oldest running job and admit it (``cancel_running``).
ON_SATURATED = ("queue", "discard", "cancel_incoming", "cancel_running")
#: The largest count or limit a policy may name (the columns are 32-bit integers).
MAX_POLICY_INT = 2**31 - 1


def positive_int(value: Any, what: str) -> int:
    """``value`` if it is an integer from 1 to :data:`MAX_POLICY_INT` (not a bool)."""
    if type(value) is not int or not 1 <= value <= MAX_POLICY_INT:
        raise DefinitionError(
            f"{what} must be an integer from 1 to {MAX_POLICY_INT}, got {value!r}"
        )
    return value


def validate_concurrency_limit(max_concurrent: Any, on_saturated: Any) -> tuple[int, str]:
    """A ceiling as it may be stored: at least one running job per partition, and one of
    :data:`ON_SATURATED`."""
    positive_int(max_concurrent, "max_concurrent")
    if on_saturated not in ON_SATURATED:
        raise DefinitionError(
            f"on_saturated must be one of {', '.join(ON_SATURATED)}, got {on_saturated!r}"
        )
    return max_concurrent, on_saturated


# -- rate classes: a token bucket per class, refilled lazily on the store clock -----------


def validate_rate_class_config(
    limit: Any, window: Any, burst: Any, paused: Any
) -> tuple[int, int, int, bool]:
    """``(limit, window_ms, burst, paused)`` as a bucket stores them. ``window`` is a
    ``timedelta`` or a number of seconds, at least a millisecond; ``burst`` (the bucket's
    size) defaults to ``limit``."""
    positive_int(limit, "limit")
    seconds = window.total_seconds() if isinstance(window, timedelta) else window
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise DefinitionError(f"window must be a timedelta or seconds, got {window!r}")
    window_ms = round(seconds * 1000) if math.isfinite(seconds) else 0
    if not 1 <= window_ms <= MAX_WINDOW_MS:
        raise DefinitionError(
            f"window must be from 1 ms to {MAX_WINDOW_MS // 86_400_000} days, got {window!r}"
        )
    burst = limit if burst is None else positive_int(burst, "burst")
    if not isinstance(paused, bool):
        raise DefinitionError(f"paused must be True or False, got {paused!r}")
    return limit, window_ms, burst, paused


#: The longest window a rate class may have: a year.
MAX_WINDOW_MS = 365 * 86_400_000


def refill(tokens: float, burst: int, limit: int, window_ms: int, elapsed_ms: float) -> float:
    """The bucket after ``elapsed_ms``: ``limit`` tokens per ``window_ms``, never above
    ``burst``. A bucket in debt (below zero, after a job reported a higher cost than it was
    charged) pays the debt back first."""
    if elapsed_ms <= 0:
        return tokens
    return min(float(burst), tokens + elapsed_ms * limit / window_ms)


def spend_needed(weight: int, burst: int) -> int:
    """The tokens a job of ``weight`` needs in the bucket to be admitted: its weight, or
    a full bucket for a job heavier than the bucket holds (which then leaves it in debt)."""
    return min(weight, burst)


def ms_until(tokens: float, weight: int, burst: int, limit: int, window_ms: int) -> int:
    """Milliseconds until a job of ``weight`` may be admitted, from a bucket at
    ``tokens`` (0 when it may be now)."""
    missing = spend_needed(weight, burst) - tokens
    if missing <= 0:
        return 0
    return math.ceil(missing * window_ms / limit)


def validate_backpressure(max_unfinished: Any) -> int:
    """A backpressure limit: a whole number of unfinished jobs from 0 (intake closed)."""
    if type(max_unfinished) is not int or not 0 <= max_unfinished <= MAX_POLICY_INT:
        raise DefinitionError(
            f"max_unfinished must be an integer from 0 to {MAX_POLICY_INT} (or None to remove "
            f"the limit), got {max_unfinished!r}"
        )
    return max_unfinished

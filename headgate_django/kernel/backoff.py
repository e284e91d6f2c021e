"""Retry delays. Pure: the store adds the result to its own clock, never a worker's."""

from __future__ import annotations

import random
from datetime import timedelta

#: The longest wait anything may ask for: a job's delay, retention, ``Snooze`` or
#: ``RetryAfter``; a durable ``ctx.sleep`` or an Operation's retry delay. The store adds a
#: wait to its clock, and MariaDB's DATETIME and Python's datetime stop at the year 9999
#: (SQLite's date functions answer NULL past it): a longer wait could not be scheduled, and
#: the pass or settlement that tried would crash on every attempt. A hundred years is far
#: beyond any real wait, so a longer one is a unit mix-up, refused with a message.
MAX_WAIT = timedelta(days=36_500)

#: Exponent cap so 2**attempt stays a small integer even at attempt 10,000.
_MAX_EXPONENT = 20


def policy_delay_ms(failures: int, *, delay_ms: int, coefficient: float, cap_ms: int | None) -> int:
    """A retry policy's delay after ``failures`` failed attempts (1 for the first retry):
    ``delay * coefficient**(failures - 1)``, at most ``cap``. No jitter: with the default
    coefficient of 1 the delay is fixed, as the policy says."""
    exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
    delay = int(delay_ms * coefficient**exponent)
    return delay if cap_ms is None else min(delay, cap_ms)


def retry_delay_ms(
    attempt: int, *, base_ms: int, cap_ms: int, rng: random.Random | None = None
) -> int:
    """``min(cap, base * 2**attempt) + jitter``, jitter uniform in ``[0, base)``.

    ``attempt`` counts failures so far (0 for the first retry). The jitter spreads a burst
    of failures so they do not all come back in the same instant.
    """
    exponent = min(max(attempt, 0), _MAX_EXPONENT)
    delay = min(cap_ms, base_ms * (2**exponent))
    jitter = (rng or random).random() * base_ms
    return int(delay + jitter)

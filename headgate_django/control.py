"""Outcomes a handler chooses on purpose. They are not errors, so they do not derive from
:class:`~headgate_django.exceptions.HeadgateError` and are never recorded as failures."""

from __future__ import annotations

from datetime import timedelta

from headgate_django.kernel.backoff import MAX_WAIT


def _check_not_too_long(name: str, delay: timedelta) -> None:
    """Refuse a delay the store could not add to its clock (past the year 9999 a job's
    ``scheduled_at`` overflows, or cannot be read back), with the same limit as a durable
    sleep. Raised in the handler, the ``ValueError`` fails the attempt with this message,
    like any other handler exception, instead of crashing the settlement."""
    if delay > MAX_WAIT:
        raise ValueError(f"{name} takes a delay of at most {MAX_WAIT.days} days, not {delay}")


class Snooze(Exception):
    """Run this job again after ``delay`` without consuming an attempt."""

    def __init__(self, delay: timedelta | float) -> None:
        if not isinstance(delay, timedelta):
            delay = timedelta(seconds=delay)
        if delay <= timedelta(0):
            raise ValueError("Snooze needs a positive delay")
        _check_not_too_long("Snooze", delay)
        self.delay = delay
        super().__init__(f"snooze for {delay}")


class Skip(Exception):
    """Stop this job for good: it is archived with ``reason`` and never retried."""

    def __init__(self, reason: str = "skipped") -> None:
        self.reason = reason
        super().__init__(reason)


class Revoke(Exception):
    """Withdraw this job: its row is deleted, nothing is retried and nothing kept.

    For work that should never have been queued (the order it was for is gone). A workflow
    node cannot vanish from its graph, so a node that raises ``Revoke`` is archived with the
    reason instead, exactly as :class:`Skip` would.
    """

    def __init__(self, reason: str = "revoked") -> None:
        self.reason = reason
        super().__init__(reason)


class Uncertain(Exception):
    """A durable Operation cannot tell whether its effect happened (``durable.Uncertain``).

    The Operation becomes *uncertain* and its execution is suspended until an operator
    resolves it (complete, fail or retry): retrying blindly could repeat the effect.
    """

    def __init__(self, reason: str = "the outcome is uncertain") -> None:
        self.reason = reason
        super().__init__(reason)


class RetryAfter(Exception):
    """This attempt failed with ``error``: retry after exactly ``delay`` (store clock),
    consuming an attempt, instead of after the queue's exponential backoff. Durable
    Operations raise it to apply their own retry policy; chain the original exception
    (``raise RetryAfter(...) from exc``) so its class and traceback are recorded."""

    def __init__(self, delay: timedelta, error: str) -> None:
        if not isinstance(delay, timedelta) or delay <= timedelta(0):
            raise ValueError("RetryAfter needs a positive timedelta")
        _check_not_too_long("RetryAfter", delay)
        self.delay = delay
        self.error = error
        super().__init__(error)


class Abort(Exception):
    """A durable Operation failed for good (``durable.Abort``): no retries; the workflow's
    future for it fails with ``message`` at once."""

    def __init__(self, message: str = "the Operation was aborted") -> None:
        self.message = message
        super().__init__(message)

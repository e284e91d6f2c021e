"""How often the durable runtime's own code may fail one of its jobs before it stops
retrying and asks an operator.

A workflow task's pass, or the code around an Operation's handler (its re-run checks,
recording its outcome), fails the same way on every attempt when the cause is a bug or
a store that refuses a write: retried on the job table's ``MAX_ATTEMPTS`` (25, over about
13 hours of backoff) the execution would look ``running`` all that while with no reason
shown. ``DURABLE_TASK_ATTEMPTS`` bounds both, so an operator sees the error within seconds
(with the default backoff).
"""

from __future__ import annotations

from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.worker import execute


def runtime_budget(ctx: JobContext) -> int:
    """Attempts of a job failing in the runtime's code before the runtime gives up on it:
    ``DURABLE_TASK_ATTEMPTS``, or the job's own budget when it is smaller (the job would
    be archived first, leaving the execution running with no reason shown)."""
    return min(headgate_settings.DURABLE_TASK_ATTEMPTS, ctx.max_attempts)


def gives_up(ctx: JobContext, exc: BaseException) -> bool:
    """Whether the attempt now failing with ``exc`` is the last of :func:`runtime_budget`.

    A lost database connection is not the job's failure: the worker runs such an attempt
    again, uncharged, on a new connection (``execute.runs_again``), so it never gives up."""
    return ctx.attempt >= runtime_budget(ctx) and not execute.runs_again(ctx, exc)

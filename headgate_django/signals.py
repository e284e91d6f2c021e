"""Job events as Django signals, sent by the worker once the store has committed an outcome.

Connect receivers the usual Django way. ``sender`` is the task (the object ``@task``
returned), so ``@receiver(job_finished, sender=charge)`` hears only ``charge`` jobs, jobs
stored under one of its aliases included; every signal also carries ``kind``, the job's
stored kind, for receivers that filter by name::

    from django.dispatch import receiver
    from headgate_django.signals import job_finished

    @receiver(job_finished, sender=charge)
    def charged(sender, *, job_id, result, **kwargs):
        ...

Signals are sent in the process that recorded the outcome (a ``runworkers`` process, or
the test's own with :mod:`headgate_django.testing`), after the commit, through
``send_robust``: a receiver that raises is logged (logger ``django.dispatch``) and never
changes the job's outcome, which is already written. Nothing is sent, and no argument is
built, while a signal has no receiver.

Arguments, as keywords, of every job signal: ``job_id``, ``kind``, ``queue``, ``attempt``
(the attempt that ran, counted as ``ctx.attempt`` counts it), ``workflow_id`` (``None``
outside workflows) and ``state`` (the state the job is in now). See the reference (``docs/reference/signals.md``) for each
signal's own arguments.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["job_archived", "job_failed", "job_finished", "job_retried", "workflow_finished"]

#: The job completed. Extra argument: ``result`` (the handler's return value).
job_finished = Signal()
#: An attempt failed and the job will run again. Extra argument: ``error``.
job_retried = Signal()
#: The job failed for good: its last attempt failed (``state="archived"``) or its payload
#: cannot be decoded (``state="undecodable"``). Extra argument: ``error``.
job_failed = Signal()
#: The job was archived: ``reason`` is ``"attempts_exhausted"`` (sent after ``job_failed``)
#: or ``"skipped"`` (the handler raised ``Skip``, or revoked a workflow node). Extra
#: arguments: ``reason`` and ``error`` (the failure or the skip's message).
job_archived = Signal()
#: A DAG workflow's coordinator finished. ``sender`` is ``None``; arguments: ``workflow_id``,
#: ``outcome`` (``"succeeded"`` or ``"failed"``), ``reason`` (``None`` on success) and
#: ``job_id`` (the coordinator's job).
workflow_finished = Signal()

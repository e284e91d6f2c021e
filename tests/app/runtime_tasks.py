"""Tasks and signal receivers for the job-runtime tests (signals, enqueue-and-wait,
aliases), loaded with :mod:`tests.app.tasks` so worker subprocesses have them too."""

from __future__ import annotations

import os
import time

from django.dispatch import receiver

from headgate_django import Skip, task
from headgate_django.signals import job_archived, job_failed, job_finished, job_retried
from tests.app.models import Execution


@task(kind="test.signals.ok")
def signals_ok(ctx, value=None):
    return {"value": value}


@task(kind="test.signals.raise")
def signals_raise(ctx):
    return "done"


@task(kind="test.signals.fail", max_attempts=2)
def signals_fail(ctx):
    raise ValueError("no luck")


@task(kind="test.signals.skip")
def signals_skip(ctx):
    raise Skip("not today")


@task(kind="test.wait.sleep")
def wait_sleep(ctx, seconds: float = 0.5, value=None):
    time.sleep(seconds)
    return {"slept": seconds, "value": value}


def _record(name: str, kwargs: dict) -> None:
    Execution.objects.create(
        job_id=kwargs["job_id"],
        label=f"{name}:{kwargs['state']}",
        attempt=kwargs["attempt"],
        fence=0,
        pid=os.getpid(),
    )


# Connected before the recording receiver below, which must still run.
@receiver(job_finished, sender=signals_raise)
def _raises(sender, **kwargs):
    raise RuntimeError("a receiver that always fails")


@receiver(job_finished, sender=signals_ok)
@receiver(job_finished, sender=signals_raise)
def _finished(sender, **kwargs):
    _record("job_finished", kwargs)


@receiver(job_retried, sender=signals_fail)
def _retried(sender, **kwargs):
    _record("job_retried", kwargs)


@receiver(job_failed, sender=signals_fail)
def _failed(sender, **kwargs):
    _record("job_failed", kwargs)


@receiver(job_archived, sender=signals_fail)
@receiver(job_archived, sender=signals_skip)
def _archived(sender, **kwargs):
    _record(f"job_archived[{kwargs['reason']}]", kwargs)


@task(kind="test.alias.new", aliases=["test.alias.old", "test.alias.older"])
def renamed(ctx, value=None):
    """A kind renamed twice: rows stored under either old name run here."""
    return {"kind": ctx.kind, "value": value}


@task(kind="test.once.then_hang")
def once_then_hang(ctx, marker: str = ""):
    """An effect under ``ctx.once``, then (on the first attempt only) a hang until killed."""

    def effect() -> int:
        return Execution.objects.create(
            job_id=ctx.job_id, label=f"effect:{marker}", attempt=ctx.attempt, fence=ctx.lease.fence
        ).pk

    pk = ctx.once("charge", effect)
    Execution.objects.create(
        job_id=ctx.job_id,
        label=f"after-once:{ctx.crash_attempt}",
        attempt=ctx.attempt,
        fence=ctx.lease.fence,
        pid=os.getpid(),
    )
    while ctx.crash_attempt == 0 and not ctx.cancelled:
        time.sleep(0.05)
    return {"effect": pk}

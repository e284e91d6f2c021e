"""Helpers for integration tests that run real ``runworkers`` processes."""

from __future__ import annotations

import json
import os
from typing import Any

from headgate_django.models import Job
from tests.app.models import Execution
from tests.conftest import WorkerProcess, wait_for

#: Maintenance and polling fast enough that a test sees a crash handled in about a second.
FAST = {"DUTY_INTERVAL": 0.2, "CRASH_BACKOFF": 0.1, "IDLE_BACKOFF_MAX": 0.2}


def headgate_env(**settings: Any) -> dict[str, str]:
    """Environment for a worker subprocess with these HEADGATE settings (see tests/settings.py)."""
    return {"HEADGATE_TEST_SETTINGS_JSON": json.dumps(settings)}


def wait_serving(worker: WorkerProcess, count: int = 1, timeout: float = 30.0) -> None:
    """Wait until ``count`` worker loops in this process' log have started."""

    def serving() -> bool:
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker exited early:\n{worker.output()}")
        return worker.output().count(" serving ") >= count

    wait_for(serving, timeout=timeout)


def runs(job_id: str) -> list[Execution]:
    return list(Execution.objects.filter(job_id=job_id).order_by("id"))


def job(job_id: str) -> Job:
    return Job.objects.get(pk=job_id)


def state_is(job_id: str, *states: str) -> bool:
    return Job.objects.filter(pk=job_id, state__in=states).exists()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

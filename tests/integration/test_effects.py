"""kill -9 of a worker right after ``ctx.once`` committed: the retry gets the recorded
result back and the effect's row count stays 1."""

from __future__ import annotations

import pytest

from headgate_django.models import Effect
from tests.app import runtime_tasks as rt
from tests.app.models import Execution
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env, job, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_committed_effect_survives_sigkill_and_is_not_run_again(start_worker):
    env = headgate_env(**FAST)
    job_id = rt.once_then_hang.enqueue(marker="kill")
    victim = start_worker("--no-duties", "--lease-ttl", "1", env=env)
    wait_for(lambda: Execution.objects.filter(job_id=job_id, label="after-once:0").exists())
    victim.kill()

    rescuer = start_worker("--lease-ttl", "1", env=env)
    wait_for(lambda: state_is(job_id, "completed"))
    effects = Execution.objects.filter(job_id=job_id, label="effect:kill")
    assert effects.count() == 1
    row = job(job_id)
    assert row.crash_attempt == 1
    assert row.result == {"effect": effects.get().pk}
    assert Execution.objects.filter(job_id=job_id, label="after-once:1").exists()
    assert Effect.objects.get(job_id=job_id, name="charge").fence == 1
    assert rescuer.terminate() == 0

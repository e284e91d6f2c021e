"""Death handlers: one call per archive for good (attempts exhausted, skipped, deadline
exceeded, undecodable), made by an internal job enqueued in the archive's own transaction;
none for a rolled-back archive, for a job that lives on, or for an internal kind."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings

from headgate_django import Envelope, Skip, enqueue, store, task, testing
from headgate_django.deaths import DEATH_KIND, DeathNotice
from headgate_django.exceptions import DefinitionError
from headgate_django.models import Job
from headgate_django.store.deadlines import job_archive_past_deadline
from tests.conformance.helpers import claim, envelope

pytestmark = pytest.mark.django_db

CALLS: list[DeathNotice] = []


def remember(notice: DeathNotice) -> None:
    CALLS.append(notice)


@task(kind="test.mortal", max_attempts=1, on_death=remember)
def mortal(ctx, how: str) -> None:
    if how == "skip":
        raise Skip("not needed")
    raise RuntimeError("boom")


@task(kind="test.immortal", max_attempts=1)
def immortal(ctx) -> None:
    raise RuntimeError("no handler")


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()
    yield
    CALLS.clear()


def _deaths() -> int:
    return Job.objects.filter(kind=DEATH_KIND).count()


@pytest.mark.parametrize(("how", "reason"), [("fail", "attempts_exhausted"), ("skip", "skipped")])
def test_handler_is_called_once_with_the_reason(how, reason):
    job_id = mortal.enqueue(how=how)
    testing.run_jobs()
    assert Job.objects.get(pk=job_id).state == "archived"
    assert [(c.job_id, c.kind, c.reason) for c in CALLS] == [(job_id, "test.mortal", reason)]
    assert _deaths() == 1
    assert Job.objects.get(kind=DEATH_KIND).state == "completed"
    testing.run_jobs()
    assert len(CALLS) == 1


def test_the_death_job_commits_with_the_archive_or_not_at_all():
    job_id = mortal.enqueue(how="fail")
    ref = claim_of(job_id)
    with pytest.raises(RuntimeError), transaction.atomic():
        store.job_retry(ref, error="boom")
        assert _deaths() == 1  # enqueued inside the archive's transaction
        raise RuntimeError("the caller's transaction rolls back")
    assert _deaths() == 0 and Job.objects.get(pk=job_id).state == "running"
    store.job_retry(ref, error="boom")
    death = Job.objects.get(kind=DEATH_KIND)
    assert (death.state, death.queue) == ("available", "default")


def claim_of(job_id: str):
    [claimed] = store.job_claim(
        worker_id="deaths", limit=1, lease_ttl=timedelta(minutes=5), queues=["default"]
    )
    assert claimed.ref.job_id == job_id
    return claimed.ref


def test_deadline_and_undecodable_are_deaths_too():
    late = Envelope(
        kind="test.mortal", queue="deaths-q", deadline=timedelta(milliseconds=50), pending=True
    )
    [late_id] = enqueue(late)
    time.sleep(0.15)
    assert late_id in job_archive_past_deadline()
    bad_id = store.job_insert_many(
        [envelope(kind="test.mortal", payload=b"not json", queue="deaths-bad")]
    )[0]
    store.job_mark_undecodable(claim(bad_id).ref, reason="bad bytes")
    testing.run_jobs()
    assert {(c.job_id, c.reason) for c in CALLS} == {
        (late_id, "deadline_exceeded"),
        (bad_id, "undecodable"),
    }


def test_no_handler_no_death_job_and_a_retry_is_not_a_death():
    immortal.enqueue()
    testing.run_jobs()
    assert _deaths() == 0

    @task(kind="test.second-chance", max_attempts=2, on_death=remember)
    def flaky(ctx) -> None:
        raise RuntimeError("once")

    flaky.enqueue()
    testing.run_one()
    assert Job.objects.get(kind="test.second-chance").state == "retryable"
    assert _deaths() == 0


def test_the_global_hook_covers_kinds_without_their_own():
    with override_settings(HEADGATE={"ON_DEATH": "tests.conformance.test_death_handlers.remember"}):
        job_id = immortal.enqueue()
        testing.run_jobs()
    assert [c.job_id for c in CALLS] == [job_id]


def test_a_failing_death_job_gets_no_death_job_of_its_own():
    def explode(notice: DeathNotice) -> None:
        raise RuntimeError("handler broke")

    with override_settings(HEADGATE={"ON_DEATH": explode, "MAX_ATTEMPTS": 1}):
        immortal.enqueue()
        testing.run_jobs()
    assert Job.objects.get(kind=DEATH_KIND).state == "archived"
    assert _deaths() == 1


@pytest.mark.parametrize("hook", ["no.such.module.fn", 42, "headgate_django.conf.DEFAULTS"])
def test_a_bad_global_hook_is_a_system_check_error(hook):
    with override_settings(HEADGATE={"ON_DEATH": hook}):
        ids = {m.id for m in run_checks()}
    assert "headgate.E030" in ids


def test_on_death_must_be_callable():
    with pytest.raises(DefinitionError, match="on_death"):

        @task(kind="test.bad-death", on_death="remember")
        def bad(ctx) -> None:
            return None


def test_a_broken_global_hook_never_blocks_an_archive():
    with override_settings(HEADGATE={"ON_DEATH": "no.such.module.fn"}):
        plain = immortal.enqueue()
        own = mortal.enqueue(how="fail")
        testing.run_jobs()
    assert Job.objects.get(pk=plain).state == "archived"
    assert Job.objects.get(pk=own).state == "archived"
    assert [c.job_id for c in CALLS] == [own]

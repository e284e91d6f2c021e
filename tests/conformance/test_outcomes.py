"""Handler outcomes end to end: claim → run → settle, through the same code the worker uses
(``headgate_django.testing``), checked against the stored row and the Execution table."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.test import override_settings

from headgate_django import Envelope, Snooze, enqueue, store, task, testing
from headgate_django.control import RetryAfter
from headgate_django.envelope import encode_call
from headgate_django.exceptions import PayloadTooLargeError
from headgate_django.kernel.backoff import MAX_WAIT
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store.fenced import Completion
from headgate_django.workflows import Workflow
from tests.app import tasks
from tests.app.models import Execution
from tests.conformance.helpers import job_in_state, near, row, state_of

pytestmark = pytest.mark.django_db


@task(kind="test.conformance.v2-no-upcaster", schema_version=2)
def v2_without_upcaster(ctx, **kwargs):
    return kwargs


@task(kind="test.conformance.bad-result", max_attempts=1)
def bad_result(ctx):
    return {1, 2}


@task(kind="test.conformance.type-error")
def adds_text(ctx, n: int = 1):
    return "n=" + n  # a TypeError of the handler's own


UNDECODABLE = {
    "newer-schema-version": Envelope(kind="test.echo", schema_version=2),
    "undecodable-bytes": Envelope(kind="test.echo", payload=b"\xff\xfe\x00"),
    "not-an-args-object": Envelope(kind="test.echo", payload=b"[1, 2]"),
    "missing-upcaster": Envelope(kind="test.conformance.v2-no-upcaster", schema_version=1),
    # stored arguments the handler cannot take: written by hand, or before a signature change
    "unexpected-argument": Envelope(kind="test.noop", payload=encode_call((), {"user": 1})),
    "too-many-positional": Envelope(kind="test.fail", payload=encode_call(("a", "b"), {})),
    "async-unexpected-argument": Envelope(kind="test.async", payload=b'{"nope": 1}'),
    # valid JSON within the size limit, nested deeper than Python's parser recurses
    "nested-too-deep": Envelope(
        kind="test.echo", payload=b'{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ),
}


@pytest.mark.parametrize("env", UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_undecodable_payloads_are_parked_not_retried(env: Envelope):
    [job_id] = enqueue(env)
    assert testing.run_one() == (job_id, "undecodable")
    after = row(job_id)
    assert after["state"] == "undecodable"
    assert after["attempt"] == 0
    assert [e["kind"] for e in after["errors"]] == ["undecodable"]
    assert testing.run_jobs(include_scheduled=True).outcomes == []


def test_an_undecodable_misfit_says_which_arguments_the_handler_refused():
    [job_id] = enqueue(UNDECODABLE["unexpected-argument"])
    testing.run_one()
    [error] = row(job_id)["errors"]
    assert error["error"] == (
        "test.noop: the arguments do not fit noop(ctx): got an unexpected keyword argument 'user'"
    )


def test_a_type_error_inside_a_handler_is_an_ordinary_failure():
    """Only arguments that cannot be bound are undecodable; a handler's own TypeError is
    retried like any failure."""
    job_id = adds_text.enqueue(n=7)
    assert testing.run_one() == (job_id, "retried")
    [error] = row(job_id)["errors"]
    assert error["kind"] == "error" and "TypeError" in error["error"], error


def test_an_older_schema_version_is_upcast():
    [job_id] = enqueue(Envelope(kind="test.versioned", payload=encode_call((), {"a": 1})))
    assert testing.run_one() == (job_id, "completed")
    assert row(job_id)["result"] == {"a": 1, "upcast_from": 1}


def test_a_bare_json_object_payload_is_keyword_arguments():
    """Hand-written payloads (an operator's repair, an HTTP enqueue) need no wrapper."""
    [job_id] = enqueue(Envelope(kind="test.echo", payload=b'{"value": {"email": "a@b.c"}}'))
    assert testing.run_one() == (job_id, "completed")
    assert row(job_id)["result"] == {"value": {"email": "a@b.c"}, "attempt": 1}


def test_revoke_deletes_the_job_without_a_retry():
    job_id = tasks.revoke.enqueue()
    assert testing.run_one() == (job_id, "revoked")
    assert not Job.objects.filter(pk=job_id).exists()


def test_a_revoked_workflow_node_is_archived_because_its_workflow_needs_an_outcome():
    enqueue(
        Workflow("revoking").add("gone", tasks.revoke.envelope(reason="no order"), []).prepare()
    )
    testing.run_jobs()
    node = row("revoking:gone")
    assert node["state"] == "archived"
    assert [(e["kind"], e["error"]) for e in node["errors"]] == [("skip", "revoked: no order")]
    assert Job.objects.get(pk="revoking:coordinator").state == "archived"


def test_success_keeps_the_result_for_the_retention():
    job_id = tasks.echo.enqueue(value=[1, "two"])
    assert testing.run_one() == (job_id, "completed")
    after = row(job_id)
    assert after["result"] == {"value": [1, "two"], "attempt": 1}
    assert near(after["expires_at"], after["finalized_at"] + timedelta(days=7))


def test_success_with_zero_retention_deletes_the_row():
    job_id = tasks.ephemeral.enqueue()
    assert testing.run_one() == (job_id, "completed")
    assert not Job.objects.filter(pk=job_id).exists()


def test_async_handler():
    job_id = tasks.async_echo.enqueue(value=5)
    assert testing.run_one() == (job_id, "completed")
    assert row(job_id)["result"] == {"async": 5}


def test_failure_consumes_an_attempt_until_success():
    job_id = tasks.flaky.enqueue(succeed_on=3)
    report = testing.run_jobs(include_scheduled=True)
    assert [label for _, label in report.outcomes] == ["retried", "retried", "completed"]
    assert list(Execution.objects.order_by("id").values_list("attempt", flat=True)) == [1, 2, 3]
    after = row(job_id)
    assert (after["state"], after["attempt"], after["result"]) == ("completed", 2, 3)
    assert [e["error"] for e in after["errors"]] == [
        "ValueError: attempt 1 fails",
        "ValueError: attempt 2 fails",
    ]


def test_snooze_does_not_consume_an_attempt():
    job_id = tasks.snooze_once.enqueue(seconds=600)
    assert testing.run_one() == (job_id, "snoozed")
    after = row(job_id)
    assert (after["state"], after["attempt"]) == ("scheduled", 0)
    assert near(after["scheduled_at"], store.db_now() + timedelta(seconds=600))
    assert testing.run_jobs().outcomes == []  # not due yet
    assert testing.run_jobs(include_scheduled=True).outcomes == [(job_id, "completed")]
    assert (row(job_id)["attempt"], row(job_id)["result"]) == (0, "woke")


def test_skip_archives_without_retrying():
    job_id = tasks.skip.enqueue(reason="already sent")
    assert testing.run_jobs(include_scheduled=True).outcomes == [(job_id, "skipped")]
    after = row(job_id)
    assert (after["state"], after["attempt"]) == ("archived", 0)
    assert after["errors"][-1]["error"] == "already sent"


def test_a_result_that_is_not_json_is_a_failure():
    [job_id] = enqueue(bad_result.envelope())
    assert testing.run_one() == (job_id, "archived")
    assert "not JSON-serialisable" in row(job_id)["errors"][0]["error"]
    assert state_of(job_id) == "archived"


@override_settings(HEADGATE={"MAX_RESULT_BYTES": 100})
def test_a_result_over_the_limit_is_refused_and_nothing_lands():
    other_id, other = job_in_state(State.RUNNING)
    job_id, claimed = job_in_state(State.RUNNING)
    before, other_before = row(job_id), row(other_id)
    big = {"text": "é" * 60}  # 60 characters, over 100 bytes as UTF-8 JSON
    with pytest.raises(PayloadTooLargeError) as info:
        store.job_save_result(claimed.ref, big)
    assert info.value.details["limit"] == 100
    with pytest.raises(PayloadTooLargeError):
        store.job_complete_many([Completion(other.ref, "small"), Completion(claimed.ref, big)])
    assert (row(job_id), row(other_id)) == (before, other_before)
    assert store.job_complete_many([Completion(claimed.ref, {"text": "é" * 10})]) == {job_id}


def test_a_huge_error_message_is_cut_in_the_worker_log_as_in_the_store(caplog):
    """A handler raising with a 100 KB message used to print all of it on the worker's
    WARNING/ERROR line for every attempt; the line now carries what the store keeps."""
    [job_id] = enqueue(tasks.always_fail.envelope(message="x" * 100_000))
    with caplog.at_level(logging.WARNING, logger="headgate_django.worker"):
        testing.run_jobs(include_scheduled=True)
    lines = [r.getMessage() for r in caplog.records if job_id in r.getMessage()]
    assert len(lines) == 3  # two "will retry", one "archived"
    stored = Job.objects.get(pk=job_id).errors[-1]["error"]
    assert stored.startswith("RuntimeError: xxx") and len(stored) == 4000
    for line in lines:
        assert len(line) < 4200 and line.endswith("…") and stored[:3900] in line


@task(kind="test.conformance.retry-after-a-century-and-more")
def retry_after_too_long(ctx):
    raise RetryAfter(timedelta(days=10**8), "the partner said: come back much later")


def test_a_snooze_past_the_longest_delay_fails_the_attempt_with_a_message():
    # The store could not add 11 million days to its clock (NULL on SQLite, an overflow on
    # MariaDB, a year PostgreSQL stores but Python cannot read back): the settlement crashed.
    job_id = tasks.snooze_once.enqueue(seconds=1e12)
    assert testing.run_one() == (job_id, "retried")
    after = row(job_id)
    assert (after["state"], after["attempt"]) == ("retryable", 1)
    assert "Snooze takes a delay of at most 36500 days" in after["errors"][-1]["error"]
    assert after["scheduled_at"] < store.db_now() + timedelta(days=1)


def test_a_retry_after_past_the_longest_delay_fails_the_attempt_with_a_message():
    job_id = retry_after_too_long.enqueue()
    assert testing.run_one() == (job_id, "retried")
    after = row(job_id)
    assert (after["state"], after["attempt"]) == ("retryable", 1)
    assert "RetryAfter takes a delay of at most 36500 days" in after["errors"][-1]["error"]
    assert after["scheduled_at"] < store.db_now() + timedelta(days=1)


def test_snooze_and_retry_after_take_the_longest_delay_itself():
    assert Snooze(MAX_WAIT).delay == MAX_WAIT
    assert RetryAfter(MAX_WAIT, "later").delay == MAX_WAIT

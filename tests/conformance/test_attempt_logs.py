"""``ctx.log``: entries kept per attempt and saved with the attempt's outcome in the same
fenced write (success, retry, skip, undecodable), never for a snooze or a lost lease;
read back with ``store.attempt_logs.job_logs``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from headgate_django import Skip, Snooze, store, task, testing
from headgate_django.context import JobContext
from headgate_django.envelope import Envelope
from headgate_django.kernel.attempt_log import MAX_ENTRIES, MAX_ENTRY_BYTES, MAX_FIELDS
from headgate_django.models import Job
from headgate_django.store.attempt_logs import MAX_LOGGED_ATTEMPTS, job_logs
from headgate_django.store.fenced import Completion
from headgate_django.worker import execute
from headgate_django.worker.runner import Worker
from headgate_django.worker.settle import completion, settle
from tests.conformance.helpers import LONG, WORKER, fresh_queue

pytestmark = pytest.mark.django_db


@task(kind="test.logs.write", max_attempts=2)
def write_logs(ctx, then: str = "ok", lines: int = 1):
    for n in range(lines):
        ctx.log.info("line", n=n)
    ctx.log.warning("careful", table="users", rows=3)
    if then == "fail":
        raise RuntimeError("broke")
    if then == "skip":
        raise Skip("not today")
    if then == "snooze":
        raise Snooze(60)
    return {"done": True}


@task(kind="test.logs.quiet")
def quiet(ctx):
    return None


def test_a_success_saves_its_entries_with_the_completion():
    job_id = write_logs.enqueue()
    assert testing.run_one() == (job_id, "completed")
    [attempt] = job_logs(job_id)
    assert attempt["attempt"] == 1 and attempt["outcome"] == "success"
    assert attempt["dropped"] == 0 and attempt["at"]
    assert [(e["level"], e["message"], e["fields"]) for e in attempt["entries"]] == [
        ("info", "line", {"n": 0}),
        ("warning", "careful", {"table": "users", "rows": 3}),
    ]
    assert Job.objects.get(pk=job_id).errors == []


def test_each_failed_attempt_keeps_its_own_entries():
    job_id = write_logs.enqueue(then="fail")
    assert testing.run_one() == (job_id, "retried")
    testing.run_jobs(include_scheduled=True)
    attempts = job_logs(job_id)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "error"), (2, "error")]
    assert Job.objects.get(pk=job_id).state == "archived"


def test_a_skip_saves_its_entries():
    job_id = write_logs.enqueue(then="skip")
    testing.run_one()
    assert [a["outcome"] for a in job_logs(job_id)] == ["skip"]


def test_a_snooze_saves_nothing():
    job_id = write_logs.enqueue(then="snooze")
    assert testing.run_one() == (job_id, "snoozed")
    assert job_logs(job_id) == []


def test_an_undecodable_payload_saves_what_was_logged_before_it():
    job_id = store.job_insert_many([Envelope(kind=write_logs.kind, payload=b"\xff not json")])[0]
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    ctx = JobContext(claimed, worker_id=WORKER)
    ctx.log.error("about to decode", size=11)
    assert settle(claimed, execute.run_attempt(ctx, claimed.payload, 1, None)) == "undecodable"
    [attempt] = job_logs(job_id)
    assert attempt["outcome"] == "undecodable"
    assert attempt["entries"][0]["fields"] == {"size": 11}


def test_an_attempt_that_logs_nothing_writes_no_logs():
    job_id = quiet.enqueue()
    testing.run_one()
    assert Job.objects.get(pk=job_id).logs is None
    assert job_logs(job_id) == []
    assert job_logs("no-such-job") is None


def test_a_lost_lease_saves_neither_the_logs_nor_the_completion():
    job_id = write_logs.enqueue()
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    ctx = JobContext(claimed, worker_id=WORKER)
    outcome = execute.run_attempt(ctx, claimed.payload, claimed.schema_version, None)
    store.job_release_many([claimed.ref])
    [again] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    assert store.job_complete_many([completion(claimed, outcome)]) == set()
    row = Job.objects.get(pk=job_id)
    assert row.logs is None and row.state == "running"
    assert store.job_complete_many([Completion(again.ref, logs=outcome.logs)]) == {job_id}
    assert [a["outcome"] for a in job_logs(job_id)] == ["success"]


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_completions_saves_only_the_logs_of_those_that_logged():
    q = fresh_queue()
    loud, calm = store.job_insert_many(
        [replace(write_logs.envelope(), queue=q), replace(quiet.envelope(), queue=q)]
    )
    Worker(queues=[q], concurrency=2, burst=True, run_duties=False).run()
    assert [a["outcome"] for a in job_logs(loud)] == ["success"]
    assert Job.objects.get(pk=calm).logs is None
    assert Job.objects.filter(pk__in=[loud, calm], state="completed").count() == 2


def test_bounds_entries_size_and_fields_and_attempts():
    job_id = write_logs.enqueue()
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    ctx = JobContext(claimed, worker_id=WORKER)
    for n in range(MAX_ENTRIES + 1):
        ctx.log.info("line", n=n)
    ctx.log.info("x" * 5000, **{f"f{n}": n for n in range(MAX_FIELDS + 3)})
    ctx.log.debug("obj", value=object())
    record = ctx.attempt_log.record(ctx.attempt)
    entries = record["entries"]
    assert len(entries) == MAX_ENTRIES
    assert record["dropped"] == 3  # 103 entries, the newest 100 kept
    big = entries[-2]
    assert big["truncated"] is True and big["message"].endswith("…")
    assert len(big["fields"]) <= MAX_FIELDS
    assert len(json.dumps(big, ensure_ascii=False, separators=(",", ":")).encode()) <= (
        MAX_ENTRY_BYTES
    )
    assert entries[-1]["fields"]["value"].startswith("<object object")
    assert store.job_complete_many([Completion(claimed.ref, logs=record)]) == {job_id}
    assert len(job_logs(job_id)[0]["entries"]) == MAX_ENTRIES


def test_only_the_newest_attempts_are_kept():
    job_id = quiet.enqueue()
    [claimed] = store.job_claim(worker_id=WORKER, limit=1, lease_ttl=LONG)
    Job.objects.filter(pk=job_id).update(logs=[{"attempt": n} for n in range(MAX_LOGGED_ATTEMPTS)])
    store.job_skip(claimed.ref, reason="enough", logs={"attempt": 99, "entries": [], "dropped": 0})
    attempts = job_logs(job_id)
    assert len(attempts) == MAX_LOGGED_ATTEMPTS
    assert attempts[-1]["attempt"] == 99 and attempts[0]["attempt"] == 1

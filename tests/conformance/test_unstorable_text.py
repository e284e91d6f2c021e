"""What a handler hands the store may hold a value a database cannot keep: a NUL character
(PostgreSQL refuses it in text and jsonb), an unpaired surrogate (no driver encodes it),
a float JSON has no spelling for (``nan``), or lists nested deeper than MariaDB's JSON
takes. Each must end its own job the same way on every database, and never fail a write
that carries other jobs' outcomes too (the worker acknowledges successes in batches)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headgate_django import Skip, store, task
from headgate_django.models import Job
from headgate_django.store.attempt_logs import job_logs
from headgate_django.worker.runner import Worker
from tests.app import tasks
from tests.conformance.helpers import fresh_queue


@task(kind="test.unstorable.nul-result", max_attempts=1)
def nul_result(ctx):
    return {"name": "a\x00b"}


@task(kind="test.unstorable.surrogate-result", max_attempts=1)
def surrogate_result(ctx):
    return ["a\ud800b"]


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@task(kind="test.unstorable.deep-result", max_attempts=1)
def deep_result(ctx):
    return _nested(40)


@task(kind="test.unstorable.deep-log")
def deep_log(ctx):
    ctx.log.info("deep", value=_nested(40), fine=_nested(3))


@task(kind="test.unstorable.nul-error", max_attempts=2)
def nul_error(ctx):
    raise ValueError("bad\x00byte \ud800")


@task(kind="test.unstorable.nul-skip")
def nul_skip(ctx):
    raise Skip("gone\x00")


@task(kind="test.unstorable.odd-log")
def odd_log(ctx):
    ctx.log.info("ratio\x00 \udfff", ratio=float("nan"), rows=[1, "x\x00"], **{"k\x00": 1})
    ctx.set_progress(1, 2, "half\x00way")
    return "done \\u0000 literally"  # a backslash, then text: storable


def _run(*envelopes):
    """Run ``envelopes`` with a few plain jobs around them through a real worker."""
    q = fresh_queue()
    plain = [replace(tasks.echo.envelope(value=n), queue=q) for n in range(3)]
    ids = store.job_insert_many([*plain, *(replace(e, queue=q) for e in envelopes)])
    Worker(queues=[q], concurrency=1, burst=True, run_duties=False).run()
    rows = {j.id: j for j in Job.objects.filter(pk__in=ids)}
    assert [rows[i].state for i in ids[:3]] == ["completed"] * 3
    return [rows[i] for i in ids[3:]]


@pytest.mark.django_db(transaction=True)
def test_a_result_the_store_cannot_keep_fails_its_job_alone():
    nul, surrogate, deep = _run(
        nul_result.envelope(), surrogate_result.envelope(), deep_result.envelope()
    )
    for row in (nul, surrogate, deep):
        assert (row.state, row.attempt) == ("archived", 1)
    assert "NUL character (U+0000) or an unpaired surrogate" in nul.errors[-1]["error"]
    assert "NUL character (U+0000) or an unpaired surrogate" in surrogate.errors[-1]["error"]
    assert "deeper than 24 levels" in deep.errors[-1]["error"]


@pytest.mark.django_db(transaction=True)
def test_an_error_message_with_a_nul_or_a_surrogate_is_recorded_cleaned():
    failed, skipped = _run(nul_error.envelope(), nul_skip.envelope())
    assert (failed.state, failed.attempt, failed.crash_attempt) == ("retryable", 1, 0)
    assert failed.errors[-1]["error"] == "ValueError: bad\ufffdbyte \ufffd"
    assert "\x00" not in failed.errors[-1]["traceback"]
    assert skipped.state == "archived"
    assert skipped.errors[-1]["error"] == "gone\ufffd"


@pytest.mark.django_db(transaction=True)
def test_log_lines_and_progress_with_odd_values_are_saved_cleaned():
    [row] = _run(odd_log.envelope())
    assert row.state == "completed"
    assert row.result == "done \\u0000 literally"
    assert row.progress["message"] == "half\ufffdway"
    [entry] = job_logs(row.id)[-1]["entries"]
    assert entry["message"] == "ratio\ufffd \ufffd"
    assert entry["fields"] == {"ratio": "nan", "rows": "[1, 'x\\x00']", "k\ufffd": 1}


@pytest.mark.django_db(transaction=True)
def test_a_log_field_nested_too_deep_is_saved_as_its_repr():
    [row] = _run(deep_log.envelope())
    assert row.state == "completed"
    [entry] = job_logs(row.id)[-1]["entries"]
    assert entry["fields"] == {"value": repr(_nested(40)), "fine": [[[[]]]]}


@task(kind="test.unstorable.deep-step", max_attempts=1)
def deep_step(ctx):
    ctx.step("fine", lambda: 1)
    ctx.step("deep", lambda: _nested(40))


@task(kind="test.unstorable.nul-step", max_attempts=1)
def nul_step(ctx):
    ctx.step("nul", lambda: "a\x00b")


@pytest.mark.django_db(transaction=True)
def test_a_step_result_the_store_cannot_keep_fails_its_attempt_the_same_on_every_database():
    """A step's value follows the job result's rule: MariaDB alone refused one nested 40
    deep (and PostgreSQL alone one holding a NUL), with a database error."""
    deep, nul = _run(deep_step.envelope(), nul_step.envelope())
    assert (deep.state, nul.state) == ("archived", "archived")
    assert deep.errors[-1]["error"] == (
        "ValueError: step 'deep': result nests lists and objects deeper than 24 levels"
    )
    assert deep.checkpoint["completed_steps"] == ["fine"]  # the refused value left no trace
    assert nul.errors[-1]["error"].startswith("ValueError: step 'nul': result holds a string")

"""Job events as Django signals (``headgate_django.signals``), sent after the store commits
an outcome, through the worker's own settle path (``headgate_django.testing``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from headgate_django import Envelope, enqueue, testing
from headgate_django.models import Job
from headgate_django.signals import (
    job_archived,
    job_failed,
    job_finished,
    job_retried,
    workflow_finished,
)
from headgate_django.workflows import Workflow
from tests.app import runtime_tasks as rt
from tests.app import tasks

pytestmark = pytest.mark.django_db

SIGNALS = {
    "job_finished": job_finished,
    "job_retried": job_retried,
    "job_failed": job_failed,
    "job_archived": job_archived,
    "workflow_finished": workflow_finished,
}


@pytest.fixture
def heard() -> Iterator[list[tuple[str, Any, dict[str, Any]]]]:
    """Every signal sent while the test runs, as ``(name, sender, kwargs)``, with the
    committed state of the job at the moment the receiver ran."""
    events: list[tuple[str, Any, dict[str, Any]]] = []
    receivers = []
    for name, signal in SIGNALS.items():

        def hear(sender: Any, signal: Signal, _name: str = name, **kwargs: Any) -> None:
            job_id = kwargs.get("job_id")
            stored = Job.objects.filter(pk=job_id).values_list("state", flat=True).first()
            events.append((_name, sender, {**kwargs, "stored_state": stored}))

        signal.connect(hear, weak=False)
        receivers.append((signal, hear))
    yield events
    for signal, hear in receivers:
        signal.disconnect(hear)


def test_a_completion_sends_job_finished_with_the_result(heard):
    job_id = rt.signals_ok.enqueue(value=7)
    assert testing.run_one() == (job_id, "completed")
    [(name, sender, kwargs)] = heard
    assert name == "job_finished"
    assert sender is rt.signals_ok
    assert kwargs["job_id"] == job_id
    assert kwargs["kind"] == "test.signals.ok"
    assert kwargs["queue"] == "default"
    assert kwargs["attempt"] == 1
    assert kwargs["workflow_id"] is None
    assert kwargs["state"] == kwargs["stored_state"] == "completed"
    assert kwargs["result"] == {"value": 7}


def test_failures_send_retried_then_failed_and_archived(heard):
    job_id = rt.signals_fail.enqueue()
    testing.run_jobs(include_scheduled=True)
    assert [(n, k["state"], k["attempt"]) for n, _, k in heard] == [
        ("job_retried", "retryable", 1),
        ("job_failed", "archived", 2),
        ("job_archived", "archived", 2),
    ]
    assert all(k["job_id"] == job_id and k["stored_state"] == k["state"] for _, _, k in heard)
    assert all(k["error"] == "ValueError: no luck" for _, _, k in heard)
    assert heard[2][2]["reason"] == "attempts_exhausted"


def test_a_skip_sends_job_archived_with_reason_skipped(heard):
    rt.signals_skip.enqueue()
    testing.run_one()
    [(name, _, kwargs)] = heard
    assert (name, kwargs["reason"], kwargs["error"]) == ("job_archived", "skipped", "not today")


def test_an_undecodable_payload_sends_job_failed(heard):
    [job_id] = enqueue(Envelope(kind="test.signals.ok", payload=b"\xff\xfe"))
    assert testing.run_one() == (job_id, "undecodable")
    [(name, _, kwargs)] = heard
    assert (name, kwargs["state"], kwargs["stored_state"]) == (
        "job_failed",
        "undecodable",
        "undecodable",
    )


def test_snoozes_and_revokes_send_nothing(heard):
    tasks.snooze_once.enqueue()
    tasks.revoke.enqueue()
    testing.run_jobs()
    assert heard == []


def test_a_sender_filter_hears_only_its_task():
    seen: list[str] = []

    def only_ok(sender: Any, **kwargs: Any) -> None:
        seen.append(kwargs["kind"])

    job_finished.connect(only_ok, sender=rt.signals_ok, weak=False)
    try:
        tasks.echo.enqueue(value=1)
        rt.signals_ok.enqueue()
        testing.run_jobs()
    finally:
        job_finished.disconnect(only_ok, sender=rt.signals_ok)
    assert seen == ["test.signals.ok"]


def test_a_raising_receiver_is_logged_and_the_job_stays_completed(caplog):
    """``tests.app.runtime_tasks`` connects a receiver that raises for this task before one
    that records: the job is completed, the error is logged, the next receiver runs."""
    from tests.app.models import Execution

    job_id = rt.signals_raise.enqueue()
    with caplog.at_level(logging.ERROR, logger="headgate_django.worker"):
        assert testing.run_one() == (job_id, "completed")
    assert Job.objects.get(pk=job_id).state == "completed"
    assert "a receiver that always fails" in caplog.text
    assert list(Execution.objects.filter(job_id=job_id).values_list("label", flat=True)) == [
        "job_finished:completed"
    ]


def test_a_receiver_that_raises_a_base_exception_does_not_escape(heard, caplog):
    def leave(sender: Any, **kwargs: Any) -> None:
        raise SystemExit(3)

    job_finished.connect(leave, weak=False)
    try:
        job_id = rt.signals_ok.enqueue()
        with caplog.at_level(logging.ERROR, logger="headgate_django.worker"):
            assert testing.run_one() == (job_id, "completed")
    finally:
        job_finished.disconnect(leave)
    assert "a receiver of a headgate signal failed" in caplog.text


def test_workflow_finished_on_success_and_on_failure(heard):
    ok = Workflow("sig-wf-ok").add("a", tasks.echo.envelope(value=1), []).prepare()
    enqueue(ok)
    bad = Workflow("sig-wf-bad").add("a", tasks.skip.envelope(), []).prepare()
    enqueue(bad)
    testing.run_jobs(include_scheduled=True)
    finished = {k["workflow_id"]: k for n, _, k in heard if n == "workflow_finished"}
    assert finished["sig-wf-ok"]["outcome"] == "succeeded"
    assert finished["sig-wf-ok"]["reason"] is None
    assert finished["sig-wf-ok"]["job_id"] == "sig-wf-ok:coordinator"
    assert finished["sig-wf-bad"]["outcome"] == "failed"
    assert finished["sig-wf-bad"]["reason"]
    # Node jobs carry their workflow's id.
    node_events = [k for n, _, k in heard if n == "job_finished" and k["kind"] == "test.echo"]
    assert [k["workflow_id"] for k in node_events] == ["sig-wf-ok"]

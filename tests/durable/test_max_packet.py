"""Durable values on MySQL/MariaDB, whose ``max_allowed_packet`` (16 MiB by default on
MariaDB 10.11) is below the default ``MAX_RESULT_BYTES`` (32 MiB): a workflow's result or
an update's result between the two reached the store and the pass failed there with a raw
error 1153 (which also ends the session) on every attempt, and the history rows one pass
writes together could exceed the packet though each fitted. Such a result now fails the
execution (or the update) like one over ``MAX_RESULT_BYTES``, and a pass's events are
written in as many statements as they need."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from headgate_django import durable
from headgate_django.exceptions import PayloadTooLargeError
from headgate_django.store.packet import max_packet
from tests.durable.helpers import counts, drive, start, types, view

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "mysql", reason="max_allowed_packet: MySQL/MariaDB"),
]


def packet() -> int:
    size = max_packet(connection)
    assert size is not None
    return size


@durable.workflow("packet-returns-text", version="1")
def returns_text(ctx: durable.Context, size: int) -> Any:
    return "x" * size


@durable.workflow("packet-box", version="1")
def box(ctx: durable.Context, _: Any) -> Any:
    ctx.select(ctx.wait_signal("close"), ctx.sleep(timedelta(hours=1)))
    return "closed"


@box.update("text")
def text(ctx: durable.Context, size: int) -> str:
    return "y" * size


def test_a_workflow_result_too_large_for_a_statement_fails_the_execution() -> None:
    too_big = start("packet-returns-text", packet())  # under MAX_RESULT_BYTES (32 MiB)
    drive()
    row = view(too_big)
    assert row.state == "failed" and row.result is None
    assert row.failure_reason.startswith("ResultTooLargeError: result is ")
    assert "max_allowed_packet" in row.failure_reason
    assert types(too_big) == ["WorkflowStarted", "WorkflowFailed"]
    # The session survived, and a result that fits is kept.
    fits = start("packet-returns-text", 1000)
    drive()
    assert (view(fits).state, len(view(fits).result)) == ("succeeded", 1000)


def test_an_update_result_too_large_for_a_statement_fails_the_update_only() -> None:
    wf = start("packet-box")
    drive()
    manager = durable.Manager()
    manager.update(wf, "text", packet(), update_id="big", wait=False)
    drive()
    failed = manager.get_update(wf, "big")
    assert failed.state == "failed" and failed.error.startswith("ResultTooLargeError: ")
    assert "max_allowed_packet" in failed.error
    assert view(wf).state == "running"
    manager.update(wf, "text", 10, update_id="small", wait=False)
    drive()
    assert manager.get_update(wf, "small").result == "y" * 10


def test_the_events_of_one_pass_too_large_together_are_written_in_statements_that_fit() -> None:
    wf = start("packet-box")
    drive()
    manager = durable.Manager()
    half = packet() * 3 // 5  # each fits a statement, two together do not
    manager.update(wf, "text", half, update_id="a", wait=False)
    manager.update(wf, "text", half, update_id="b", wait=False)
    drive()  # one pass completes both updates
    assert [manager.get_update(wf, u).result == "y" * half for u in "ab"] == [True, True]
    assert types(wf)[-4:] == ["UpdateAccepted"] * 2 + ["UpdateCompleted"] * 2
    assert view(wf).state == "running"


def test_values_too_large_for_a_statement_are_refused_with_the_size_error(settings) -> None:
    # MAX_PAYLOAD_BYTES raised past the server's packet: a start's input or a signal's
    # payload failed with a raw error 1153 (which also ends the session).
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 32 * 1024 * 1024}
    wf = start("packet-box")
    drive()
    rows = counts()
    with pytest.raises(PayloadTooLargeError, match="max_allowed_packet"):
        start("packet-box", "x" * packet())
    with pytest.raises(PayloadTooLargeError, match="max_allowed_packet"):
        durable.Client().signal(wf, "close", "x" * packet())
    assert counts() == rows
    durable.Client().signal(wf, "close", "x" * 1000)
    drive()
    assert view(wf).result == "closed"


@durable.operation("packet-length", version="1")
def length(ctx: Any, value: str) -> int:
    return len(value)


@durable.workflow("packet-sends-text", version="1")
def sends_text(ctx: durable.Context, size: int) -> Any:
    return ctx.execute_operation("packet-length", "1", "z" * size).result()


@durable.workflow("packet-continues", version="1")
def continues(ctx: durable.Context, size: Any) -> Any:
    if isinstance(size, int):
        ctx.continue_as_new("z" * size)
    return len(size)


def test_a_workflow_value_too_large_for_a_statement_fails_the_execution(settings) -> None:
    # MAX_PAYLOAD_BYTES raised past the server's packet: an Operation's input or a new run's
    # input failed the pass with a raw error 1153 on every attempt.
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 32 * 1024 * 1024}
    op, new_run = start("packet-sends-text", packet()), start("packet-continues", packet())
    fits = start("packet-sends-text", 1000)
    drive()
    for wf in (op, new_run):
        row = view(wf)
        assert row.state == "failed" and row.failure_reason.startswith("PayloadTooLargeError: ")
        assert "max_allowed_packet" in row.failure_reason
    assert view(fits).result == 1000

"""``Client().signal_with_start``: start unless a live execution holds the business key,
then signal it, in one transaction; bad input is a clear error and writes nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from headgate_django import DefinitionError, durable
from headgate_django.exceptions import PayloadError, PayloadTooLargeError
from headgate_django.models import Execution
from tests.durable.helpers import counts, drive, history, in_parallel, view

pytestmark = pytest.mark.django_db


@durable.workflow("sws-collect", version="1")
def collect(ctx: durable.Context, first: Any) -> Any:
    items = [first]
    while True:
        item = ctx.wait_signal("item")
        ctx.select(item)
        if item.result() == "end":
            return items
        items.append(item.result())


def sws(payload: Any, key: str = "cart:1", **options: Any) -> durable.SignalWithStartResult:
    return durable.Client().signal_with_start(
        "sws-collect", "1", "opened", "item", payload, business_idempotency_key=key, **options
    )


def test_the_first_call_starts_and_signals_later_calls_only_signal() -> None:
    first = sws("apple", message_id="m-1")
    assert (first.started, first.delivered) == (True, True)
    wf = first.workflow_id
    assert [t for t, _ in history(wf)] == ["WorkflowStarted", "SignalReceived"]
    second = sws("pear", message_id="m-2")
    assert second == durable.SignalWithStartResult(wf, started=False, delivered=True)
    repeat = sws("pear", message_id="m-2")
    assert repeat == durable.SignalWithStartResult(wf, started=False, delivered=False)
    sws("end")
    drive()
    assert view(wf).result == ["opened", "apple", "pear"]


def test_a_finished_execution_frees_the_key_for_a_new_start() -> None:
    first = sws("end")
    drive()
    assert view(first.workflow_id).state == "succeeded"
    second = sws("apple")
    assert second.started is True
    assert second.workflow_id != first.workflow_id


def test_the_signal_joins_the_start_in_one_transaction() -> None:
    from django.db import transaction

    before = counts()
    with pytest.raises(RuntimeError), transaction.atomic():
        sws("apple")
        raise RuntimeError("the caller rolls back")
    assert counts() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(5))  # a few tries at an overlap
def test_two_callers_at_once_start_one_execution_and_both_signals_reach_it(
    attempt: int,
) -> None:
    barrier = threading.Barrier(2)

    def call(item: str) -> durable.SignalWithStartResult:
        barrier.wait(10)
        return sws(item, key="cart:race")

    first, second = in_parallel(lambda: call("apple"), lambda: call("pear"))
    assert isinstance(first, durable.SignalWithStartResult), first
    assert isinstance(second, durable.SignalWithStartResult), second
    assert first.workflow_id == second.workflow_id
    assert sorted([first.started, second.started]) == [False, True]
    assert Execution.objects.filter(business_idempotency_key="cart:race").count() == 1
    signals = [p["payload"] for t, p in history(first.workflow_id) if t == "SignalReceived"]
    assert sorted(signals) == ["apple", "pear"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            lambda: durable.Client().signal_with_start(
                "sws-nope", "1", None, "item", business_idempotency_key="k"
            ),
            "no durable workflow 'sws-nope' version '1'",
        ),
        (
            lambda: durable.Client().signal_with_start(
                "sws-collect", "2", None, "item", business_idempotency_key="k"
            ),
            "no durable workflow 'sws-collect' version '2' is registered here (versions: 1)",
        ),
        (lambda: sws(object()), "not JSON-serialisable"),
        (
            lambda: durable.Client().signal_with_start(
                "sws-collect", "1", {1j}, "item", business_idempotency_key="k"
            ),
            "not JSON-serialisable",
        ),
        (
            lambda: durable.Client().signal_with_start(
                "sws-collect", "1", None, " item", business_idempotency_key="k"
            ),
            "a signal name must be a non-empty string",
        ),
        (lambda: sws("x", key=""), "a business idempotency key must be a non-empty string"),
        (lambda: sws("x", key=None), "a business idempotency key must be a non-empty string"),
        (lambda: sws("x", message_id=""), "a message id must be a non-empty string"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(call: Any, error: str) -> None:
    before = counts()
    with pytest.raises(
        (DefinitionError, PayloadError), match=error.replace("(", r"\(").replace(")", r"\)")
    ):
        call()
    assert counts() == before


@pytest.mark.parametrize(
    ("input", "payload", "meta", "message"),
    [
        ("x" * 999, "apple", None, "the start's input is 1001 bytes"),
        ("opened", "x" * 999, None, "the payload of signal 'item' is 1001 bytes"),
        ("opened", "apple", {"m": "x" * 999}, "the start's meta is 1007 bytes"),
    ],
)
def test_a_value_over_the_payload_limit_is_refused_before_anything_is_written(
    settings: Any, input: Any, payload: Any, meta: Any, message: str
) -> None:
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    before = counts()
    with pytest.raises(PayloadTooLargeError, match=f"{message}, over the 1000-byte limit"):
        durable.Client().signal_with_start(
            "sws-collect", "1", input, "item", payload, business_idempotency_key="k", meta=meta
        )
    assert counts() == before


def test_a_signal_over_the_payload_limit_to_the_live_execution_writes_nothing(
    settings: Any,
) -> None:
    wf = sws("apple").workflow_id
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 1000}
    before = counts()
    with pytest.raises(PayloadTooLargeError, match="signal 'item' is 1001 bytes"):
        sws("x" * 999)
    assert counts() == before
    assert [t for t, _ in history(wf)] == ["WorkflowStarted", "SignalReceived"]

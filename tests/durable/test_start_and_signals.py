"""Start, business keys and signals through the database (azync cases 1, 2, 20–23), and
the bad-input contract: a clear error and nothing written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from headgate_django import DefinitionError, NotFoundError, durable, testing
from headgate_django.exceptions import IdConflictError, PayloadError, PayloadTooLargeError
from headgate_django.models import Execution, SignalInbox
from tests.durable.helpers import counts, drive, history, live_jobs, start, task_job, types, view

pytestmark = pytest.mark.django_db


@durable.operation("sig-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    return value


@durable.workflow("sig-one-op", version="1")
def one_op(ctx: durable.Context, value: Any) -> Any:
    return ctx.execute_operation("sig-echo", "1", value).result()


@durable.workflow("sig-approval", version="1")
def approval(ctx: durable.Context, _: Any) -> Any:
    decision = ctx.wait_signal("approval")
    if ctx.select(decision, ctx.sleep(timedelta(hours=1))) == 0:
        return decision.result()
    return "timed out"


@durable.workflow("sig-after-op", version="1")
def after_op(ctx: durable.Context, _: Any) -> Any:
    first = ctx.execute_operation("sig-echo", "1", "op").result()
    go = ctx.wait_signal("go")
    index = ctx.select(go, ctx.sleep(timedelta(hours=1)))
    return [first, index, go.result()]


@durable.workflow("sig-two", version="1")
def two_signals(ctx: durable.Context, _: Any) -> Any:
    first, second = ctx.wait_signal("x"), ctx.wait_signal("x")
    ctx.select(first)
    ctx.select(second)
    return [first.result(), second.result()]


def test_case_01_start_records_history_and_one_task() -> None:
    first = durable.Client().start("sig-one-op", "1", {"n": 1}, business_idempotency_key="k1")
    assert first.deduplicated is False
    assert history(first.workflow_id) == [
        ("WorkflowStarted", {"input": {"n": 1}, "seed": history(first.workflow_id)[0][1]["seed"]})
    ]
    assert [j.kind for j in live_jobs(first.workflow_id)] == ["headgate:durable-task"]
    assert task_job(first.workflow_id).state == "available"

    again = durable.Client().start("sig-one-op", "1", {"n": 2}, business_idempotency_key="k1")
    assert again == durable.StartResult(first.workflow_id, True)
    assert Execution.objects.count() == 1
    assert len(live_jobs(first.workflow_id)) == 1

    other = durable.Client().start("sig-one-op", "1", {"n": 3}, business_idempotency_key="k2")
    assert other.deduplicated is False and other.workflow_id != first.workflow_id


def test_case_02_a_terminal_execution_frees_its_business_key() -> None:
    first = start("sig-one-op", "a", business_idempotency_key="order:1")
    drive()
    assert view(first).state == "succeeded"
    second = durable.Client().start("sig-one-op", "1", "b", business_idempotency_key="order:1")
    assert second.deduplicated is False and second.workflow_id != first


def test_explicit_workflow_id_and_meta_are_kept() -> None:
    result = durable.Client().start(
        "sig-one-op", "1", 1, workflow_id="order-42", task_queue="durable-q", meta={"who": "me"}
    )
    assert result == durable.StartResult("order-42", False)
    row = view("order-42")
    assert (row.task_queue, row.meta, row.name, row.version) == (
        "durable-q",
        {"who": "me"},
        "sig-one-op",
        "1",
    )
    assert task_job("order-42").queue == "durable-q"
    with pytest.raises(IdConflictError):
        durable.Client().start("sig-one-op", "1", 2, workflow_id="order-42")


def test_case_19_a_signal_wakes_a_select_parked_on_a_timer() -> None:
    wf = start("sig-approval")
    drive()
    assert types(wf) == ["WorkflowStarted", "TimerScheduled"]
    assert task_job(wf).state == "scheduled"  # parked until the timer, an hour away
    assert durable.Client().signal(wf, "approval", "approved") is True
    assert task_job(wf).state == "available"  # the signal woke it
    drive()
    assert view(wf).state == "succeeded"
    assert view(wf).result == "approved"
    assert types(wf) == [
        "WorkflowStarted",
        "TimerScheduled",
        "SignalReceived",
        "SelectResolved",
        "WorkflowCompleted",
    ]
    assert history(wf)[3][1]["index"] == 0


def test_case_20_an_early_signal_is_ready_without_parking() -> None:
    wf = start("sig-after-op")
    testing.run_one()  # the first pass schedules the Operation and parks
    assert durable.Client().signal(wf, "go", {"early": True})  # before anything waits for it
    drive()
    assert view(wf).result == ["op", 0, {"early": True}]
    rows = history(wf)
    assert [t for t, _ in rows] == [
        "WorkflowStarted",
        "OperationScheduled",
        "SignalReceived",
        "OperationCompleted",
        "TimerScheduled",
        "SelectResolved",
        "WorkflowCompleted",
    ]


def test_case_21_signal_dedupe_by_message_id() -> None:
    wf = start("sig-approval")
    client = durable.Client()
    assert client.signal(wf, "noise", 1, message_id="m1") is True
    assert client.signal(wf, "noise", 2, message_id="m1") is False
    assert client.signal(wf, "noise", 3, message_id="m2") is True
    assert client.signal(wf, "other", 4, message_id="m1") is True  # dedupe is per name
    assert client.signal(wf, "noise", 5) is True  # no message id: always a new message
    assert [p["payload"] for t, p in history(wf) if t == "SignalReceived"] == [1, 3, 4, 5]
    assert SignalInbox.objects.filter(workflow_id=wf).count() == 4


def test_case_22_the_kth_wait_gets_the_kth_signal() -> None:
    wf = start("sig-two")
    drive()
    durable.Client().signal(wf, "x", "a")
    drive()
    assert view(wf).state == "running"  # the second wait has nothing yet
    durable.Client().signal(wf, "x", "b")
    drive()
    assert view(wf).result == ["a", "b"]


def test_case_23_signal_to_a_terminal_execution_is_recorded_without_a_task() -> None:
    wf = start("sig-one-op", 1)
    drive()
    assert durable.Client().signal(wf, "late", "x") is True
    assert types(wf)[-1] == "SignalReceived"
    assert SignalInbox.objects.filter(workflow_id=wf).count() == 1
    assert live_jobs(wf) == []


def test_case_23_signal_to_a_suspended_execution_waits_for_resume() -> None:
    wf = start("sig-approval")
    drive()
    durable.Manager().suspend(wf, "maintenance")
    assert durable.Client().signal(wf, "approval", "yes") is True
    assert drive() == []  # no pass while suspended
    assert view(wf).state == "suspended"
    durable.Manager().resume(wf)
    drive()
    assert view(wf).result == "yes"


# -- bad input: a clear error, nothing written ----------------------------------------


def test_start_of_an_unknown_workflow_or_version_writes_nothing() -> None:
    before = counts()
    with pytest.raises(DefinitionError, match="'sig-nope' version '1'"):
        durable.Client().start("sig-nope", "1", None)
    with pytest.raises(DefinitionError, match=r"version '2' is registered here \(versions: 1\)"):
        durable.Client().start("sig-one-op", "2", None)
    # A name that is not a string failed with "unhashable type"; a version 1 (not "1") was
    # "not registered here (versions: 1)".
    with pytest.raises(DefinitionError, match="a workflow name must be a non-empty string"):
        durable.Client().start({"name": "sig-one-op"}, "1", None)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="a workflow version must be a non-empty string"):
        durable.Client().start("sig-one-op", 1, None)  # type: ignore[arg-type]
    assert counts() == before


@pytest.mark.parametrize(
    "options",
    [
        {"input": {"when": object()}},
        {"input": float("nan")},
        {"meta": {"x": {1, 2}}},
        {"meta": ["not", "a", "dict"]},
        {"business_idempotency_key": ""},
        {"workflow_id": " padded "},
        {"workflow_id": "x" * 201},
        {"workflow_id": "orders/42"},  # the HTTP API refuses it too: no route could address it
        {"task_queue": "bad queue!"},
    ],
)
def test_start_with_bad_input_writes_nothing(options: dict[str, Any]) -> None:
    before = counts()
    input = options.pop("input", None)
    with pytest.raises(DefinitionError):
        durable.Client().start("sig-one-op", "1", input, **options)
    assert counts() == before


def test_non_json_input_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        durable.Client().start("sig-one-op", "1", {"when": object()})


def test_signal_to_a_missing_execution_writes_nothing() -> None:
    before = counts()
    with pytest.raises(NotFoundError, match="execution nope does not exist"):
        durable.Client().signal("nope", "approval", "yes")
    assert counts() == before


def test_signal_with_bad_input_writes_nothing() -> None:
    wf = start("sig-approval")
    before = counts()
    with pytest.raises(PayloadError):
        durable.Client().signal(wf, "approval", object())
    with pytest.raises(DefinitionError):
        durable.Client().signal(wf, "", "x")
    with pytest.raises(DefinitionError):
        durable.Client().signal(wf, "approval", "x", message_id="")
    assert counts() == before


# -- values over HEADGATE["MAX_PAYLOAD_BYTES"]: refused, nothing written ----------------

LIMIT = 1000
#: A JSON string of exactly ``LIMIT`` bytes (the quotes count), and one a byte over.
AT_LIMIT, OVER_LIMIT = "x" * (LIMIT - 2), "x" * (LIMIT - 1)


@pytest.mark.parametrize(
    ("options", "what", "size"),
    [({"input": OVER_LIMIT}, "input", 1001), ({"meta": {"m": OVER_LIMIT}}, "meta", 1007)],
)
def test_a_start_over_the_payload_limit_writes_nothing(
    settings: Any, options: dict[str, Any], what: str, size: int
) -> None:
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": LIMIT}
    before = counts()
    input = options.pop("input", None)
    message = f"the start's {what} is {size} bytes, over the 1000-byte limit"
    with pytest.raises(PayloadTooLargeError, match=message) as info:
        durable.Client().start("sig-one-op", "1", input, workflow_id="too-big", **options)
    assert info.value.details == {"size": size, "limit": LIMIT}
    assert counts() == before
    assert not Execution.objects.filter(pk="too-big").exists()
    # At the limit exactly, it is kept ({"m":"…"} is six bytes and a quote more).
    durable.Client().start("sig-one-op", "1", AT_LIMIT, meta={"m": AT_LIMIT[6:]})


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"in": value}
    return value


def test_values_nested_deeper_than_every_database_keeps_are_refused_first() -> None:
    """MariaDB's JSON_VALID refuses 32 levels, with the store's own wrapping included; the
    store refuses deeper values on every database, with a clear error."""
    with pytest.raises(PayloadError, match=r"start's input nests .* deeper than 24 levels"):
        durable.Client().start("sig-one-op", "1", nested(25), workflow_id="too-deep")
    assert not Execution.objects.filter(pk="too-deep").exists()
    wf = start("sig-approval")
    before = counts()
    with pytest.raises(PayloadError, match="payload of signal 'approval' nests"):
        durable.Client().signal(wf, "approval", [nested(24)])
    assert counts() == before
    kept = durable.Client().start("sig-one-op", "1", nested(24)).workflow_id
    durable.Client().signal(wf, "approval", nested(24))
    drive()
    assert durable.Manager().get(kept).result == nested(24)
    assert durable.Manager().get(wf).state == "succeeded"


def test_a_signal_over_the_payload_limit_writes_nothing(settings: Any) -> None:
    wf = start("sig-approval")
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": LIMIT}
    before = counts()
    with pytest.raises(
        PayloadTooLargeError,
        match="the payload of signal 'approval' is 1001 bytes, over the 1000-byte limit",
    ):
        durable.Client().signal(wf, "approval", OVER_LIMIT, message_id="m-big")
    assert counts() == before
    assert not SignalInbox.objects.filter(workflow_id=wf).exists()
    assert durable.Client().signal(wf, "approval", AT_LIMIT, message_id="m-big") is True


def test_a_nul_character_no_database_keeps_alike_is_refused_first() -> None:
    """PostgreSQL refuses a NUL (U+0000) in jsonb with its own error; SQLite and MariaDB
    kept it. The store refuses it on every database, as it does a result holding one."""
    wf = start("sig-approval")
    before = counts()
    nul = {"note": "a\x00b"}
    with pytest.raises(PayloadError, match="start's input holds a string with a NUL"):
        durable.Client().start("sig-one-op", "1", nul, workflow_id="nul")
    with pytest.raises(PayloadError, match="start's meta holds a string with a NUL"):
        durable.Client().start("sig-one-op", "1", meta={"k\x00": 1}, workflow_id="nul")
    with pytest.raises(PayloadError, match="payload of signal 'approval' holds"):
        durable.Client().signal(wf, "approval", [nul])
    assert counts() == before
    # An escaped backslash before "u0000" is no NUL: it is kept.
    assert durable.Client().signal(wf, "approval", "a\\u0000b") is True
    drive()
    assert durable.Manager().get(wf).state == "succeeded"

"""Queries and updates through the database: what they see, what they record, bad input.

Every "nothing was written" claim is checked against the row counts of the durable tables
and the job table, and every query against the execution's history length.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from headgate_django import durable
from headgate_django.exceptions import (
    DefinitionError,
    IdConflictError,
    InvalidTransitionError,
    NotFoundError,
    PayloadError,
    PayloadTooLargeError,
    QueryFailedError,
    UnknownHandlerError,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WaitInTransactionError,
)
from headgate_django.kernel.replay_updates import ENDED_FIRST
from headgate_django.store.durable_history import lock_execution
from tests.durable.helpers import counts, drive, history, start, types, view

pytestmark = pytest.mark.django_db


@durable.operation("qu-bill", version="1")
def bill(ctx: Any, items: list[str]) -> dict[str, Any]:
    return {"billed": items}


@durable.workflow("qu-cart", version="1")
def cart(ctx: durable.Context, _: Any) -> Any:
    ctx.state["items"] = []
    ctx.state["stage"] = "shopping"
    ctx.select(ctx.wait_signal("checkout"), ctx.sleep(timedelta(hours=1)))
    ctx.state["stage"] = "billing"
    receipt = ctx.execute_operation("qu-bill", "1", list(ctx.state["items"])).result()
    ctx.state["stage"] = "done"
    return receipt


@cart.query("status")
def status(ctx: durable.Context) -> dict[str, Any]:
    return {"stage": ctx.state["stage"], "items": ctx.state["items"]}


@cart.query("item")
def item(ctx: durable.Context, index: int) -> Any:
    return ctx.state["items"][index]


@cart.query("sneaky")
def sneaky(ctx: durable.Context) -> Any:
    return ctx.sleep(timedelta(seconds=1))


@cart.query("a-set")
def a_set(ctx: durable.Context) -> Any:
    return {1, 2}


def _no_duplicates(ctx: durable.Context, name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError("an item is a non-empty string")
    if name in ctx.state["items"]:
        raise ValueError(f"{name} is already in the cart")


@cart.update("add", validator=_no_duplicates)
def add(ctx: durable.Context, name: str) -> int:
    ctx.state["items"].append(name)
    return len(ctx.state["items"])


@cart.update("explode")
def explode(ctx: durable.Context, _: Any) -> Any:
    raise RuntimeError("boom")


def length(workflow_id: str) -> int:
    assert view(workflow_id).history_length == len(history(workflow_id))
    return len(history(workflow_id))


def parked_cart() -> str:
    workflow_id = start("qu-cart")
    drive()
    assert types(workflow_id) == ["WorkflowStarted", "TimerScheduled"]
    return workflow_id


# -- definitions ---------------------------------------------------------------------


def test_bad_handler_definitions_fail_when_decorated() -> None:
    async def coroutine(ctx: Any) -> None: ...

    with pytest.raises(DefinitionError, match="plain"):
        cart.query("async")(coroutine)
    with pytest.raises(DefinitionError, match=r"takes \(ctx, payload\)"):
        cart.update("no-payload")(lambda ctx: None)
    with pytest.raises(DefinitionError, match=r"takes \(ctx, payload\)"):
        cart.update("bad-validator", validator=lambda: None)
    with pytest.raises(DefinitionError, match="already has query 'status'"):
        cart.query("status")(lambda ctx: None)
    with pytest.raises(DefinitionError):
        cart.query(" spaced ")
    assert cart.query("status")(status) is status  # re-importing the module is no conflict
    assert set(cart.queries) == {"status", "item", "sneaky", "a-set"}
    assert set(cart.updates) == {"add", "explode"}


# -- queries -------------------------------------------------------------------------


def test_a_query_sees_the_last_committed_event_and_appends_nothing() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()
    before, rows = length(workflow_id), counts()
    assert manager.query(workflow_id, "status") == {"stage": "shopping", "items": []}
    assert (length(workflow_id), counts()) == (before, rows)
    durable.Client().signal(workflow_id, "checkout")  # committed, not replayed by a pass yet
    before, rows = length(workflow_id), counts()
    assert manager.query(workflow_id, "status") == {"stage": "billing", "items": []}
    assert (length(workflow_id), counts()) == (before, rows)
    assert types(workflow_id)[-1] == "SignalReceived"  # the query scheduled no Operation


def test_a_query_of_a_finished_execution_sees_the_end_state() -> None:
    workflow_id = parked_cart()
    durable.Manager().update(workflow_id, "add", "tea", wait=False)
    drive()
    durable.Client().signal(workflow_id, "checkout")
    drive()
    assert view(workflow_id).state == "succeeded"
    before = length(workflow_id)
    assert durable.Manager().query(workflow_id, "status") == {"stage": "done", "items": ["tea"]}
    assert durable.Manager().query(workflow_id, "item", 0) == "tea"
    assert length(workflow_id) == before


def test_bad_queries_are_clear_errors_and_write_nothing() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()
    before, rows = length(workflow_id), counts()
    with pytest.raises(UnknownHandlerError, match="has no query 'nope'"):
        manager.query(workflow_id, "nope")
    with pytest.raises(NotFoundError):
        manager.query("missing", "status")
    with pytest.raises(QueryFailedError, match="HandlerCommandError"):
        manager.query(workflow_id, "sneaky")
    with pytest.raises(QueryFailedError, match="IndexError"):
        manager.query(workflow_id, "item", 3)
    with pytest.raises(QueryFailedError, match="not JSON"):
        manager.query(workflow_id, "a-set")
    with pytest.raises(PayloadError):
        manager.query(workflow_id, "item", {1})
    with pytest.raises(PayloadTooLargeError):
        manager.query(workflow_id, "item", "x" * (1024 * 1024))
    with pytest.raises(DefinitionError):
        manager.query(workflow_id, "")
    assert (length(workflow_id), counts()) == (before, rows)


def test_a_query_needs_the_workflow_code_in_this_process(swap_code: Any) -> None:
    workflow_id = parked_cart()
    swap_code("workflow", "qu-cart", "1", None)
    with pytest.raises(DefinitionError, match="not registered in this process"):
        durable.Manager().query(workflow_id, "status")


# -- updates -------------------------------------------------------------------------


def test_an_update_is_recorded_then_handled_by_the_next_pass() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()
    accepted = manager.update(workflow_id, "add", "tea", update_id="u-1", wait=False)
    assert (accepted.state, accepted.update_id, accepted.deduplicated) == ("accepted", "u-1", False)
    assert history(workflow_id)[-1] == (
        "UpdateAccepted",
        {"update_id": "u-1", "name": "add", "payload": "tea"},
    )
    assert manager.get_update(workflow_id, "u-1").state == "accepted"
    # Accepted, not handled by a pass yet: a query already sees it applied where the code waits.
    assert manager.query(workflow_id, "status")["items"] == ["tea"]
    drive()
    done = manager.get_update(workflow_id, "u-1")
    assert (done.state, done.result, done.name) == ("succeeded", 1, "add")
    assert types(workflow_id)[-2:] == ["UpdateAccepted", "UpdateCompleted"]
    durable.Client().signal(workflow_id, "checkout")
    drive()
    assert view(workflow_id).result == {"billed": ["tea"]}


def test_a_repeated_update_id_returns_the_first_result_without_running_again() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()
    manager.update(workflow_id, "add", "tea", update_id="u-1", wait=False)
    drive()
    rows = counts()
    again = manager.update(workflow_id, "add", "tea", update_id="u-1", wait=False)
    assert (again.state, again.result, again.deduplicated) == ("succeeded", 1, True)
    assert counts() == rows
    assert types(workflow_id).count("UpdateAccepted") == 1
    # Even after the execution finished (when new updates are refused).
    durable.Client().signal(workflow_id, "checkout")
    drive()
    assert manager.update(workflow_id, "add", "tea", update_id="u-1", wait=False).result == 1
    with pytest.raises(IdConflictError, match="already used"):
        manager.update(workflow_id, "add", "coffee", update_id="u-1", wait=False)


def test_an_update_rejected_by_its_validator_writes_nothing() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()
    manager.update(workflow_id, "add", "tea", wait=False)
    drive()
    before, rows = length(workflow_id), counts()
    with pytest.raises(UpdateRejectedError, match="tea is already in the cart"):
        manager.update(workflow_id, "add", "tea", update_id="u-dup", wait=False)
    with pytest.raises(UpdateRejectedError, match="non-empty string"):
        manager.update(workflow_id, "add", 42, wait=False)
    assert (length(workflow_id), counts()) == (before, rows)
    with pytest.raises(NotFoundError):
        manager.get_update(workflow_id, "u-dup")


def test_bad_updates_are_clear_errors_and_write_nothing() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()
    before, rows = length(workflow_id), counts()
    with pytest.raises(UnknownHandlerError, match="has no update 'remove'"):
        manager.update(workflow_id, "remove", "tea", wait=False)
    with pytest.raises(NotFoundError):
        manager.update("missing", "add", "tea", wait=False)
    with pytest.raises(PayloadTooLargeError):
        manager.update(workflow_id, "add", "x" * (1024 * 1024), wait=False)
    with pytest.raises(PayloadError):
        manager.update(workflow_id, "add", {1}, wait=False)
    with pytest.raises(DefinitionError):
        manager.update(workflow_id, "add", "tea", update_id=" spaced ", wait=False)
    with pytest.raises(WaitInTransactionError):
        manager.update(workflow_id, "add", "tea")  # this test runs in a transaction
    with pytest.raises(NotFoundError):
        manager.get_update(workflow_id, "never")
    assert (length(workflow_id), counts()) == (before, rows)


def test_updates_to_a_finished_execution_are_refused() -> None:
    workflow_id = parked_cart()
    durable.Manager().cancel(workflow_id)
    before, rows = length(workflow_id), counts()
    with pytest.raises(InvalidTransitionError, match="only a running execution takes updates"):
        durable.Manager().update(workflow_id, "add", "tea", wait=False)
    assert (length(workflow_id), counts()) == (before, rows)


def test_a_failing_handler_fails_the_update_and_not_the_workflow() -> None:
    workflow_id = parked_cart()
    durable.Manager().update(workflow_id, "explode", None, update_id="u-x", wait=False)
    drive()
    failed = durable.Manager().get_update(workflow_id, "u-x")
    assert (failed.state, failed.error) == ("failed", "RuntimeError: boom")
    assert view(workflow_id).state == "running"


def test_an_update_accepted_after_the_wakeup_runs_at_the_next_wait() -> None:
    workflow_id = parked_cart()
    durable.Client().signal(workflow_id, "checkout")
    # Accepted after the signal, before any pass: the code decides the bill first, then
    # waits on it, and handles the update there.
    durable.Manager().update(workflow_id, "add", "late", update_id="u-late", wait=False)
    drive()
    late = durable.Manager().get_update(workflow_id, "u-late")
    assert (late.state, late.result) == ("succeeded", 1)
    assert view(workflow_id).result == {"billed": []}


def test_an_update_accepted_as_the_workflow_returns_is_recorded_unhandled(
    swap_code: Any,
) -> None:
    workflow_id = parked_cart()
    durable.Client().signal(workflow_id, "checkout")
    drive()
    # A history where the code never waits after the update: it ends first.
    quick = durable.WorkflowDef(lambda ctx, _: "quick", "qu-cart", "1")
    quick.update("add")(add)
    swap_code("workflow", "qu-cart", "1", quick)
    second = start("qu-cart")
    durable.Manager().update(second, "add", "tea", update_id="u-q", wait=False)
    drive()
    assert view(second).state == "succeeded"
    dropped = durable.Manager().get_update(second, "u-q")
    assert (dropped.state, dropped.error) == ("failed", ENDED_FIRST)
    assert history(second)[-2][1]["handled"] is False


@pytest.mark.django_db(transaction=True)
def test_a_query_does_not_wait_for_the_lock_a_pass_holds() -> None:
    workflow_id = parked_cart()
    locked, release = threading.Event(), threading.Event()
    timed_out: list[bool] = []

    def hold_the_header() -> None:  # as a replay pass does while it commits
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                lock_execution(cursor, connection, workflow_id)
                locked.set()
                timed_out.append(not release.wait(20))
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_header)
    holder.start()
    try:
        assert locked.wait(20)
        answer = durable.Manager().query(workflow_id, "status")
    finally:
        release.set()
        holder.join()
    assert answer == {"stage": "shopping", "items": []}
    assert timed_out == [False]  # answered while the lock was still held


def _concurrently(*calls: Any) -> list[Any]:
    """Run ``calls`` on threads of their own at once; their results or exceptions."""
    start_line = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            start_line.wait(10)
            outcomes[i] = calls[i]()
        except Exception as exc:
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


@pytest.mark.django_db(transaction=True)
def test_racing_senders_record_an_update_once_and_validate_against_each_other() -> None:
    workflow_id = parked_cart()
    manager = durable.Manager()

    def send(update_id: str, item: str) -> Any:
        return lambda: manager.update(workflow_id, "add", item, update_id=update_id, wait=False)

    same = _concurrently(*(send("u-same", "tea") for _ in range(3)))
    assert all(isinstance(o, durable.UpdateView) for o in same), same
    assert sorted(o.deduplicated for o in same) == [False, True, True]
    assert types(workflow_id).count("UpdateAccepted") == 1
    # Two other ids for the same item: the validator of the one that comes second sees
    # the first (accepted, handled where the code waits) and refuses it.
    rivals = _concurrently(send("u-a", "jam"), send("u-b", "jam"))
    assert sorted(type(o).__name__ for o in rivals) == ["UpdateRejectedError", "UpdateView"]
    assert types(workflow_id).count("UpdateAccepted") == 2
    drive()
    assert manager.query(workflow_id, "status")["items"] == ["tea", "jam"]


@pytest.mark.django_db(transaction=True)
class TestWaiting:
    """``wait=True`` polls from outside any transaction, as a script or a view would."""

    def test_waiting_returns_the_result_and_times_out_while_no_worker_runs(self) -> None:
        workflow_id = parked_cart()
        manager = durable.Manager()
        with pytest.raises(UpdateTimeoutError) as timed_out:
            manager.update(workflow_id, "add", "tea", update_id="u-w", timeout=0.2)
        assert timed_out.value.update_id == "u-w"
        assert manager.get_update(workflow_id, "u-w").state == "accepted"
        drive()
        assert manager.update(workflow_id, "add", "tea", update_id="u-w") == 1
        manager.update(workflow_id, "explode", None, update_id="u-e", wait=False)
        drive()
        with pytest.raises(UpdateFailedError, match="RuntimeError: boom"):
            manager.update(workflow_id, "explode", None, update_id="u-e")
        with transaction.atomic(), pytest.raises(WaitInTransactionError):
            manager.update(workflow_id, "add", "jam")

    def test_waiting_on_an_update_of_a_cancelled_execution_fails(self) -> None:
        workflow_id = parked_cart()
        manager = durable.Manager()
        manager.update(workflow_id, "add", "tea", update_id="u-c", wait=False)
        manager.cancel(workflow_id)
        with pytest.raises(UpdateFailedError, match="ended before handling"):
            manager.update(workflow_id, "add", "tea", update_id="u-c", timeout=5)

    @pytest.mark.parametrize(
        ("timeout", "error"),
        [("5", TypeError), (True, TypeError), (-1, ValueError), (float("nan"), ValueError)],
    )
    def test_a_bad_timeout_is_refused_before_the_update_is_recorded(
        self, timeout: Any, error: type[Exception]
    ) -> None:
        # The update was recorded first; then the wait failed with "unsupported operand",
        # timed out at once (-1) or never (NaN).
        workflow_id = parked_cart()
        before = counts()
        with pytest.raises(error, match="timeout must be a number of seconds"):
            durable.Manager().update(workflow_id, "add", "tea", timeout=timeout)
        assert counts() == before

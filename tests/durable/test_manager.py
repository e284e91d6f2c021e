"""Manager verbs, the duties and the store's history appends (azync cases 32–36), plus the
public surface of ``headgate_django.durable``."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import DefinitionError, durable, store, testing
from headgate_django.durable import duties
from headgate_django.exceptions import InvalidTransitionError, NotFoundError, RevisionConflictError
from headgate_django.kernel.replay_events import history_from_json
from headgate_django.models import Execution, HistoryEvent, Job, SignalInbox
from headgate_django.store.durable import execution_cancel, execution_reconcile, execution_vacuum
from headgate_django.store.durable_history import NewEvent, history_append
from tests.durable.helpers import (
    drive,
    history,
    live_jobs,
    op_job,
    seqs,
    start,
    task_job,
    types,
    view,
)

pytestmark = pytest.mark.django_db

runs: list[Any] = []


@durable.operation("mgr-echo", version="1")
def echo(ctx: Any, value: Any) -> Any:
    runs.append(value)
    return value


@durable.workflow("mgr-one", version="1")
def one(ctx: durable.Context, value: Any) -> Any:
    return ctx.execute_operation("mgr-echo", "1", value).result()


@durable.workflow("mgr-wait", version="1")
def wait(ctx: durable.Context, _: Any) -> Any:
    ctx.execute_operation("mgr-echo", "1", "first").result()
    go = ctx.wait_signal("go")
    ctx.select(go)
    return go.result()


@pytest.fixture(autouse=True)
def _reset() -> None:
    runs.clear()


def test_case_32_cancel_ends_the_execution_and_its_live_jobs() -> None:
    wf = start("mgr-one", 1)
    testing.run_one()  # the Operation job is now available
    durable.Manager().cancel(wf, "customer asked")
    row = view(wf)
    assert (row.state, row.failure_reason) == ("cancelled", "customer asked")
    assert row.finished_at is not None
    assert live_jobs(wf) == []
    assert op_job(wf).state == "cancelled" and task_job(wf).state == "cancelled"
    assert types(wf)[-1] == "WorkflowCancelled"
    with pytest.raises(InvalidTransitionError):
        durable.Manager().cancel(wf)
    assert drive() == []  # nothing runs for it any more
    assert runs == []
    assert durable.Client().signal(wf, "late", 1)  # recorded, no task
    assert live_jobs(wf) == []


def test_the_reconcile_duty_cancels_the_jobs_a_cut_short_cancel_left_live() -> None:
    """A cancel commits the execution's end, then cancels its jobs in a second
    transaction: a process that died in between left the parked workflow task
    ``scheduled`` (and an Operation runnable) until the vacuum deleted the execution."""
    waiting, other = start("mgr-wait"), start("mgr-wait")
    drive()  # both wait for their signal, their tasks parked
    assert runs == ["first", "first"]
    assert [j.state for j in live_jobs(waiting)] == ["scheduled"]
    execution_cancel(waiting, reason="by hand")  # ... and the process died here
    assert [j.state for j in live_jobs(waiting)] == ["scheduled"]
    report = duties.reconcile()
    assert report["cancelled"] == 1
    assert live_jobs(waiting) == [] and task_job(waiting).state == "cancelled"
    assert [j.state for j in live_jobs(other)] == ["scheduled"]  # a live one keeps its own
    assert duties.reconcile()["cancelled"] == 0


def test_cancel_while_suspended_and_of_a_missing_execution() -> None:
    wf = start("mgr-one", 1)
    durable.Manager().suspend(wf)
    durable.Manager().cancel(wf)
    assert view(wf).state == "cancelled"
    with pytest.raises(NotFoundError):
        durable.Manager().cancel("missing")


@pytest.mark.parametrize(
    "reason, says",
    [
        ("a\x00b", "NUL character"),
        ("a\ud800b", "unpaired surrogate"),
        ("x" * 2001, "2001 characters long, over 2000"),
        (42, "must be a string, not int"),
    ],
)
@pytest.mark.parametrize("verb", ["cancel", "suspend"])
def test_a_reason_no_database_keeps_alike_is_refused_and_nothing_changes(
    verb: str, reason: Any, says: str
) -> None:
    wf = start("mgr-one", 1)
    before = types(wf)
    with pytest.raises(DefinitionError, match=says):
        getattr(durable.Manager(), verb)(wf, reason)
    assert view(wf).state == "running" and types(wf) == before


def test_case_33_the_reconciler_revives_an_execution_with_no_task() -> None:
    wf = start("mgr-one", "x")
    healthy = start("mgr-one", "y")
    Job.objects.filter(pk=task_job(wf).pk).delete()  # its only task is lost
    assert execution_reconcile(stalled_for=timedelta(minutes=5), limit=100) == {
        "revived": [],
        "settled": [],
    }
    time.sleep(0.05)
    report = execution_reconcile(stalled_for=timedelta(milliseconds=20), limit=100)
    assert report == {"revived": [wf], "settled": []}  # the healthy one has its task
    assert task_job(wf).state == "available"
    drive()
    assert (view(wf).result, view(healthy).result) == ("x", "y")
    assert sorted(runs) == ["x", "y"]  # each Operation ran exactly once


def test_the_reconciler_leaves_an_execution_whose_workflow_task_is_quarantined() -> None:
    # The wake leaves a quarantined task as it is, yet the duty logged "had no live workflow
    # task: revived it" on every sweep, and a hundred such executions filled its slice for good.
    wf = start("mgr-one", "x")
    lost = start("mgr-one", "y")
    Job.objects.filter(pk=task_job(wf).pk).update(state="quarantined")  # by the reclaim duty
    Job.objects.filter(pk=task_job(lost).pk).delete()
    time.sleep(0.05)
    report = execution_reconcile(stalled_for=timedelta(milliseconds=20), limit=1)
    assert report == {"revived": [lost], "settled": []}
    assert execution_reconcile(stalled_for=timedelta(milliseconds=20), limit=100) == {
        "revived": [],
        "settled": [],
    }
    assert task_job(wf).state == "quarantined" and view(wf).state == "running"


def test_the_reconciler_records_operations_finished_without_a_hook() -> None:
    wf = start("mgr-one", "x")
    testing.run_one()
    Job.objects.filter(pk=op_job(wf).pk).update(state="quarantined")  # by the reclaim duty
    report = execution_reconcile(stalled_for=timedelta(minutes=5), limit=100)
    assert report == {"revived": [], "settled": [wf]}
    drive()
    assert view(wf).state == "failed"
    assert "the Operation's job is quarantined" in view(wf).failure_reason


def test_the_durable_duties_on_a_store_without_executions_ask_once_and_load_nothing(
    monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    def unexpected(**_: Any) -> Any:
        raise AssertionError("the durable store is not needed with no execution")

    for name in ("execution_vacuum", "execution_reconcile"):
        monkeypatch.setattr(f"headgate_django.store.durable.{name}", unexpected)
    duties._sweep["after"] = "some-execution"
    with django_assert_num_queries(2):
        assert duties.vacuum() == {"deleted": 0, "runs": 0, "more": False}
        assert duties.reconcile() == {
            "revived": 0,
            "settled": 0,
            "restored": 0,
            "cancelled": 0,
            "closed": 0,
        }
    assert duties._sweep["after"] == ""


def test_case_34_vacuum_deletes_terminal_executions_after_retention(settings: Any) -> None:
    old, recent, running = start("mgr-one", 1), start("mgr-one", 2), start("mgr-wait")
    drive()
    durable.Client().signal(old, "x", 1)
    Execution.objects.filter(pk=old).update(finished_at=store.db_now() - timedelta(days=31))
    settings.HEADGATE = {"DURABLE_RETENTION": None}
    assert duties.vacuum() == {"deleted": 0, "runs": 0, "more": False}  # no retention: kept forever
    settings.HEADGATE = {"DURABLE_RETENTION": timedelta(days=30)}
    assert duties.vacuum() == {"deleted": 1, "runs": 0, "more": False}
    with pytest.raises(NotFoundError):
        durable.Manager().get(old)
    assert not HistoryEvent.objects.filter(execution_id=old).exists()
    assert not SignalInbox.objects.filter(workflow_id=old).exists()
    assert not Job.objects.filter(workflow_id=f"durable:{old}").exists()
    assert view(recent).state == "succeeded" and view(running).state == "running"
    assert execution_vacuum(older_than=timedelta(0), limit=100) == [recent]


def test_one_batch_bounds_every_part_of_the_durable_duties(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The duties' batch was written in several places (two constants and the defaults of
    the store functions they call), so changing one left the other parts as they were."""
    monkeypatch.setattr(duties, "BATCH", 1)
    settings.HEADGATE = {"DURABLE_RETENTION": timedelta(days=30)}
    finished = [start("mgr-one", n) for n in (1, 2)]
    stalled = [start("mgr-wait") for _ in range(2)]
    cut = [start("mgr-wait") for _ in range(2)]
    drive()
    long_ago = store.db_now() - timedelta(days=31)
    Execution.objects.filter(pk__in=finished).update(finished_at=long_ago)
    Execution.objects.filter(pk__in=stalled).update(updated_at=long_ago)
    Job.objects.filter(pk__in=[task_job(wf).pk for wf in stalled]).delete()
    for wf in cut:
        execution_cancel(wf, reason="a cancel cut short: its jobs are left live")

    assert [duties.vacuum()["deleted"] for _ in range(3)] == [1, 1, 0]
    assert [len(duties.finish_cut_cancels()) for _ in range(3)] == [1, 1, 0]
    assert [duties.reconcile()["revived"] for _ in range(3)] == [1, 1, 0]


def test_case_34_job_eviction_keeps_an_uncertain_operation() -> None:
    @durable.operation("mgr-unsure", version="1")
    def unsure(ctx: Any, _: Any) -> Any:
        raise durable.Uncertain("no answer")

    @durable.workflow("mgr-call-unsure", version="1")
    def call(ctx: durable.Context, _: Any) -> Any:
        return ctx.execute_operation("mgr-unsure", "1", None).result()

    wf = start("mgr-call-unsure")
    drive()
    Job.objects.filter(kind="headgate:durable-op").exclude(expires_at=None).update(
        expires_at=store.db_now()
    )
    store.job_evict_retained()
    assert op_job(wf).state == "archived"  # still there for resolve_uncertain


def test_case_35_duplicate_registration_is_refused_at_import() -> None:
    with pytest.raises(DefinitionError, match="already registered"):

        @durable.workflow("mgr-one", version="1")
        def impostor(ctx: Any, value: Any) -> Any:
            return value

    with pytest.raises(DefinitionError, match="already registered"):

        @durable.operation("mgr-echo", version="1")
        def impostor_op(ctx: Any, value: Any) -> Any:
            return value

    @durable.workflow("mgr-one", version="2")  # a new version of the same name is fine
    def one_v2(ctx: Any, value: Any) -> Any:
        return value

    assert durable.Client().start("mgr-one", "2", 1).deduplicated is False


@pytest.mark.parametrize(
    "decorate",
    [
        lambda: durable.workflow("", version="1"),
        lambda: durable.workflow("x", version=""),
        lambda: durable.workflow("x" * 129),
        lambda: durable.operation("x", max_attempts=0),
        lambda: durable.operation("x", timeout=timedelta(0)),
        lambda: durable.operation("x", queue="bad queue"),
    ],
)
def test_bad_definitions_fail_at_decoration(decorate: Any) -> None:
    with pytest.raises(DefinitionError):
        decorate()


def test_definitions_must_take_ctx_and_input_and_be_sync() -> None:
    with pytest.raises(DefinitionError, match="takes exactly"):
        durable.workflow("mgr-bad-sig")(lambda ctx: None)

    async def coroutine(ctx: Any, value: Any) -> None: ...

    with pytest.raises(DefinitionError, match="must not be async"):
        durable.operation("mgr-async")(coroutine)


def test_case_36_history_appends_are_contiguous_and_conditional() -> None:
    wf = start("mgr-wait")
    assert seqs(wf) == [1]
    signal = NewEvent("SignalReceived", {"name": "n", "payload": 1})
    assert history_append(wf, expected_seq=1, events=[signal, signal]) == 3
    assert history_append(wf, expected_seq=3, events=[signal]) == 4
    with pytest.raises(RevisionConflictError):
        history_append(wf, expected_seq=3, events=[signal])  # a stale writer
    assert seqs(wf) == [1, 2, 3, 4] and view(wf).history_length == 4
    with pytest.raises(NotFoundError):
        history_append("missing", expected_seq=0, events=[signal])


def test_get_list_and_history_export() -> None:
    ids = sorted(start("mgr-one", n) for n in range(5))
    drive()
    waiting = start("mgr-wait")
    drive()
    manager = durable.Manager()
    page = manager.list({"name": "mgr-one", "state": "succeeded"}, limit=3)
    assert [v.id for v in page.items] == ids[:3] and page.cursor == ids[2]
    rest = manager.list({"name": "mgr-one"}, cursor=page.cursor, limit=3)
    assert [v.id for v in rest.items] == ids[3:] and rest.cursor is None
    assert [v.id for v in manager.list({"state": "running"}).items] == [waiting]
    with pytest.raises(DefinitionError, match="unknown execution filter"):
        manager.list({"colour": "red"})
    # A misspelt state, or a filter that is not a dict, is refused, not an empty page.
    with pytest.raises(DefinitionError, match="state must be one of running, suspended, "):
        manager.list({"state": "Running"})
    with pytest.raises(DefinitionError, match="filters must be a dict, not str"):
        manager.list("state=running")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="limit must be an integer between 1 and 1000"):
        manager.list({}, limit="5")  # type: ignore[arg-type]
    exported = manager.history(waiting)
    parsed = history_from_json(exported)
    assert (parsed.name, parsed.version, parsed.workflow_id) == ("mgr-wait", "1", waiting)
    assert [e.type for e in parsed.events] == types(waiting)
    assert json.loads(exported)["events"][0]["payload"]["input"] is None
    assert durable.replay(exported).workflow_id == waiting  # the current code reproduces it
    with pytest.raises(NotFoundError):
        manager.history("missing")
    assert history(waiting)[-1][0] == "OperationCompleted"


def test_public_api_is_pinned() -> None:
    assert sorted(durable.__all__) == [
        "Abort",
        "CANCEL_REQUESTED",
        "ChildFailedError",
        "ChildFuture",
        "ChildView",
        "Client",
        "Context",
        "ExecutionView",
        "Future",
        "Manager",
        "NondeterminismError",
        "OperationContext",
        "OperationDef",
        "OperationFailedError",
        "Page",
        "QueryDef",
        "RunView",
        "SignalWithStartResult",
        "StartResult",
        "Uncertain",
        "UpdateDef",
        "UpdateView",
        "WorkflowDef",
        "operation",
        "replay",
        "workflow",
    ]
    for name in durable.__all__:
        assert getattr(durable, name) is not None
    from headgate_django.exceptions import HeadgateError

    assert not issubclass(durable.Uncertain, HeadgateError)
    assert not issubclass(durable.Abort, HeadgateError)

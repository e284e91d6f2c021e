"""Durable signals: buffered early emission, idempotency keys, size limits, the 100-record
horizon, store timestamps, the legacy helper, and delivery across a worker kill."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from headgate_django import (
    DefinitionError,
    IdConflictError,
    NotFoundError,
    enqueue,
    store,
    testing,
)
from headgate_django.exceptions import PayloadError, PayloadTooLargeError
from headgate_django.models import SignalEmission as EmissionRow
from headgate_django.models import WorkflowCheckpoint
from headgate_django.workflows import (
    SignalEmission,
    Workflow,
    emit_signal,
    emit_signal_with,
    inspect_workflow,
    list_signals,
    workflow_events,
)
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import FAST, headgate_env
from tests.workflows.helpers import (
    checkpoint,
    coordinator,
    event_names,
    job,
    job_state,
    recorded,
    run,
    runs,
)

APPROVED = {"approved": True, "reviewer": "Ada"}
SOURCE = {"emitter": "admin-api", "actor": "operator-42"}


def onboarding(prepare=None, workflow_id: str = "onboarding:42") -> Workflow:
    return (
        Workflow(workflow_id)
        .add("prepare", prepare or tasks.record_run.envelope(label="prepare"), [])
        .add_signal("approval", "approved", ["prepare"])
        .add("welcome", tasks.record_run.envelope(label="welcome"), ["approval"])
    )


def emission(key: str = "approval:ticket-1842", payload=None, source=None, signal="approved"):
    return SignalEmission(
        signal, key, APPROVED if payload is None else payload, SOURCE if source is None else source
    )


@pytest.mark.django_db
def test_the_signal_node_is_a_retained_pending_internal_job():
    enqueue(onboarding().retention(timedelta(days=3)).prepare())
    row = job("onboarding:42:approval")
    assert (row.state, row.kind) == ("pending", "headgate:signal")
    assert row.retention == timedelta(days=7)  # never below the job default
    run()
    assert job_state("onboarding:42:approval") == "pending"  # nothing emitted: still waiting
    assert coordinator("onboarding:42").state == "scheduled"
    assert runs("onboarding:42:welcome") == []


@pytest.mark.django_db
def test_an_early_emission_is_buffered_until_the_signal_nodes_dependencies_complete():
    # prepare snoozes on its first run, so the signal arrives long before it completes.
    enqueue(onboarding(prepare=tasks.snooze_once.envelope(seconds=3600)).prepare())
    receipt = emit_signal_with("onboarding:42", emission())  # before the first tick
    assert (receipt.matched, receipt.promoted, receipt.inserted) == (1, 1, True)
    assert not WorkflowCheckpoint.objects.filter(pk="onboarding:42").exists()

    testing.run_jobs()  # first ticks; the signal job runs; prepare snoozes
    assert job_state("onboarding:42:approval") == "completed"
    assert job_state("onboarding:42:prepare") == "scheduled"
    assert "approval" not in checkpoint("onboarding:42").completed
    assert job_state("onboarding:42:welcome") == "pending"
    assert runs("onboarding:42:welcome") == []

    run()  # prepare completes; only now is the signal consumed and welcome released
    assert coordinator("onboarding:42").state == "completed"
    events = [(e["event"], e.get("node")) for e in workflow_events("onboarding:42")]
    assert events.index(("node_completed", "approval")) > events.index(
        ("node_completed", "prepare")
    )
    assert ("signal_consumed", "approval") in events
    assert runs("onboarding:42:welcome")[0].id > runs("onboarding:42:prepare")[-1].id
    assert job("onboarding:42:approval").result == {"signal": "approved", "payload": APPROVED}


@pytest.mark.django_db
def test_replaying_a_key_returns_the_original_record():
    enqueue(onboarding().prepare())
    first = emit_signal_with("onboarding:42", emission())
    # The same content in another key order is the same canonical JSON.
    again = emit_signal_with(
        "onboarding:42", emission(payload={"reviewer": "Ada", "approved": True})
    )
    assert again.inserted is False
    assert again.promoted == 0
    assert again.matched == 1
    assert again.emission == first.emission
    assert len(list_signals("onboarding:42")) == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "other",
    [
        emission(payload={"approved": False, "reviewer": "Ada"}),
        emission(source={"emitter": "someone-else"}),
        emission(signal="rejected"),
    ],
    ids=["payload", "source", "signal"],
)
def test_reusing_a_key_for_other_content_is_refused(other):
    enqueue(onboarding().add_signal("rejection", "rejected", []).prepare())
    original = emit_signal_with("onboarding:42", emission())
    with pytest.raises(IdConflictError):
        emit_signal_with("onboarding:42", other)
    assert list_signals("onboarding:42") == [original.emission]
    assert job_state("onboarding:42:rejection") == "pending"


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "limit"), [("payload", 64 * 1024), ("source", 16 * 1024)])
def test_payload_and_source_limits(field, limit):
    enqueue(onboarding().prepare())

    def sized(size: int) -> str:
        return "x" * (size - 2)  # a JSON string: two quotes around the characters

    with pytest.raises(PayloadTooLargeError) as info:
        emit_signal_with("onboarding:42", emission("too-big", **{field: sized(limit + 1)}))
    assert f"{limit + 1} bytes, over the {limit}-byte limit" in str(info.value)
    assert list_signals("onboarding:42") == []
    assert job_state("onboarding:42:approval") == "pending"

    receipt = emit_signal_with("onboarding:42", emission("fits", **{field: sized(limit)}))
    assert receipt.inserted
    assert getattr(list_signals("onboarding:42")[0], field) == sized(limit)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad",
    [
        {"payload": {"note": "a\x00b"}},
        {"payload": {"a\x00": 1}},
        {"source": {"actor": ["ok", "\x00"]}},
        {"key": "approval\x00"},
    ],
    ids=["payload-value", "payload-key", "source", "key"],
)
def test_a_nul_character_is_refused_on_every_backend(bad):
    # PostgreSQL cannot store U+0000 in text or jsonb: it failed there with a DataError
    # (HTTP 500) while the other backends stored it.
    enqueue(onboarding().prepare())
    with pytest.raises(DefinitionError, match="NUL"):
        emit_signal_with("onboarding:42", emission(**bad))
    assert list_signals("onboarding:42") == []
    assert job_state("onboarding:42:approval") == "pending"


def nested(levels: int) -> object:
    value: object = "deep"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "limit"), [("payload", 23), ("source", 24)])
def test_payload_and_source_nesting_is_limited_on_every_backend(field, limit):
    # Accepted before, a payload nested 24 levels failed every attempt of the signal node
    # (whose result holds the payload one level down) and so failed the workflow; one
    # nested 32 levels failed with an IntegrityError on MariaDB only.
    enqueue(onboarding().prepare())
    for too_deep in (limit + 1, 40):
        with pytest.raises(PayloadError, match=f"deeper than {limit} levels"):
            emit_signal_with(
                "onboarding:42", emission(f"deep-{too_deep}", **{field: nested(too_deep)})
            )
    assert list_signals("onboarding:42") == []
    assert job_state("onboarding:42:approval") == "pending"

    receipt = emit_signal_with("onboarding:42", emission("fits", **{field: nested(limit)}))
    assert receipt.inserted and receipt.promoted == 1
    run()
    assert inspect_workflow("onboarding:42").coordinator_state == "completed"
    assert getattr(list_signals("onboarding:42")[0], field) == nested(limit)


@pytest.mark.django_db
def test_the_101st_emission_trims_the_oldest_which_ends_its_idempotency():
    enqueue(onboarding().prepare())
    for i in range(101):
        emit_signal_with("onboarding:42", emission(f"k{i:03}", payload={"n": i}))
    history = list_signals("onboarding:42", limit=100)
    assert [r.idempotency_key for r in history] == [f"k{i:03}" for i in range(100, 0, -1)]
    assert EmissionRow.objects.filter(workflow_id="onboarding:42").count() == 100
    # k001 is still inside the horizon; k000 is not, so its key may be used again.
    with pytest.raises(IdConflictError):
        emit_signal_with("onboarding:42", emission("k001", payload={"n": "other"}))
    assert emit_signal_with("onboarding:42", emission("k000", payload={"n": "new"})).inserted
    assert list_signals("onboarding:42", limit=1)[0].payload == {"n": "new"}
    assert "k001" not in {r.idempotency_key for r in list_signals("onboarding:42")}


@pytest.mark.django_db
def test_list_signals_is_newest_first_and_pages_with_before():
    enqueue(onboarding().prepare())
    for i in range(5):
        emit_signal_with("onboarding:42", emission(f"k{i}", payload={"n": i}))
    page = list_signals("onboarding:42", limit=2)
    assert [r.payload["n"] for r in page] == [4, 3]
    page = list_signals("onboarding:42", before=page[-1].id, limit=2)
    assert [r.payload["n"] for r in page] == [2, 1]
    assert [r.payload["n"] for r in list_signals("onboarding:42", before=page[-1].id)] == [0]
    with pytest.raises(DefinitionError):
        list_signals("onboarding:42", limit=0)
    with pytest.raises(NotFoundError):
        list_signals("no-such-workflow")


@pytest.mark.django_db
def test_the_store_stamps_the_emission_time_whatever_the_worker_clock(monkeypatch):
    enqueue(onboarding().prepare())
    skew = timedelta(days=3)
    real_time, real_now = time.time, store.db_now
    from django.utils import timezone

    real_tz_now = timezone.now
    monkeypatch.setattr(time, "time", lambda: real_time() + skew.total_seconds())
    monkeypatch.setattr(timezone, "now", lambda: real_tz_now() + skew)
    before = real_now()
    record = emit_signal_with("onboarding:42", emission()).emission
    after = real_now()
    assert before <= record.emitted_at <= after
    assert list_signals("onboarding:42")[0].emitted_at == record.emitted_at


@pytest.mark.django_db
def test_an_undeclared_signal_is_refused_and_nothing_is_recorded():
    enqueue(onboarding().prepare())
    with pytest.raises(DefinitionError) as info:
        emit_signal_with("onboarding:42", emission(signal="unknown"))
    assert "declares no signal 'unknown'" in str(info.value)
    with pytest.raises(DefinitionError):
        emit_signal("onboarding:42", "unknown")
    assert list_signals("onboarding:42") == []
    with pytest.raises(NotFoundError):
        emit_signal_with("no-such-workflow", emission())
    with pytest.raises(DefinitionError):
        emit_signal_with("onboarding:42", emission(key=""))


@pytest.mark.django_db
def test_legacy_emit_signal_stores_a_null_payload_empty_source_and_a_legacy_key():
    enqueue(onboarding().prepare())
    receipt = emit_signal("onboarding:42", "approved")
    assert (receipt.matched, receipt.promoted, receipt.inserted) == (1, 1, True)
    record = list_signals("onboarding:42")[0]
    assert (record.idempotency_key, record.payload, record.source) == (
        "legacy:approved",
        None,
        {},
    )
    assert emit_signal("onboarding:42", "approved").inserted is False
    run()
    assert coordinator("onboarding:42").state == "completed"


@pytest.mark.django_db
def test_one_emission_releases_every_node_waiting_for_that_signal():
    enqueue(
        Workflow("fan")
        .add_signal("first", "go", [])
        .add_signal("second", "go", [])
        .add("after", tasks.echo.envelope(), ["first", "second"])
        .prepare()
    )
    receipt = emit_signal_with("fan", SignalEmission("go", "once"))
    assert (receipt.matched, receipt.promoted) == (2, 2)
    run()
    assert inspect_workflow("fan").coordinator_state == "completed"


@pytest.mark.django_db
def test_a_finished_workflow_is_not_revived_by_a_signal():
    enqueue(Workflow("done").add_signal("s", "go", []).prepare())
    emit_signal_with("done", SignalEmission("go", "first"))
    run()
    assert coordinator("done").state == "completed"
    late = emit_signal_with("done", SignalEmission("go", "late"))
    assert (late.inserted, late.promoted) == (True, 0)
    assert run().outcomes == []
    assert coordinator("done").state == "completed"
    assert event_names("done")[-1] == "workflow_succeeded"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_signal_emitted_while_no_worker_is_alive_is_still_delivered(start_worker):
    enqueue(onboarding(prepare=tasks.echo.envelope()).prepare())
    env = headgate_env(**FAST)
    first = start_worker("--no-duties", "--lease-ttl", "1", env=env)
    wait_for(lambda: "prepare" in recorded("onboarding:42"))
    first.kill()  # the signal node is still pending
    assert job_state("onboarding:42:approval") == "pending"
    receipt = emit_signal_with("onboarding:42", emission())
    assert receipt.promoted == 1
    second = start_worker("--lease-ttl", "1", env=env)
    wait_for(lambda: coordinator("onboarding:42").state == "completed", timeout=60)
    assert [r.label for r in runs("onboarding:42:welcome")] == ["welcome"]
    assert second.terminate() == 0

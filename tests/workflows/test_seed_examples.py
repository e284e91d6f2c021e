"""Every code example of the workflow guide (seed ``000_46d84ad11b5dd1ec``), translated to
Python, run as written and ending in the documented state.

The Rust ``store.enqueue(&batch)`` is ``enqueue(batch)``; ``register_coordinator`` has no
Python call: the app registers the coordinator and its internal handlers itself, and
``runworkers`` (here ``testing.run_jobs``) serves their queue.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import timedelta

import pytest

from headgate_django import enqueue, store, testing
from headgate_django.envelope import encode_call
from headgate_django.registry import find_task
from headgate_django.workflows import (
    SignalEmission,
    Workflow,
    WorkflowGraft,
    emit_signal_with,
    inspect_workflow,
    list_signals,
    list_workflows,
    prepare_bundle,
    request_failed_subgraph_retry,
    workflow_dependents,
)
from tests.app import tasks
from tests.workflows.helpers import coordinator, job, ms, node_states, run, runs

extract = tasks.record_run.envelope(label="extract")
customers = tasks.record_run.envelope(label="customers")
orders = tasks.record_run.envelope(label="orders")
index = tasks.record_run.envelope(label="index")
prepare_job = tasks.record_run.envelope(label="prepare")
welcome_job = tasks.record_run.envelope(label="welcome")
publish_job = tasks.record_run.envelope(label="publish")
notify_job = tasks.record_run.envelope(label="notify")
survey_job = tasks.record_run.envelope(label="survey")
account_job = tasks.record_run.envelope(label="account")
charge_job = tasks.record_run.envelope(label="charge")
receipt_job = tasks.record_run.envelope(label="receipt")


@pytest.mark.django_db
def test_prepare_the_graph_run_the_coordinator_and_inspect():
    batch = (
        Workflow("daily-import")
        .coordinator_queue("workflows")
        .add("extract", extract, [])
        .add("customers", customers, ["extract"])
        .add("orders", orders, ["extract"])
        .add("index", index, ["customers", "orders"])
        .prepare()
    )
    enqueue(batch)
    # "Register the coordinator": the app did, for the kind the batch uses.
    assert find_task("headgate:workflow") is not None
    run()

    graph = inspect_workflow("daily-import")
    index_node = graph.node("index")
    assert index_node is not None, "index node missing"
    prerequisites = graph.dependencies("index")
    downstream = workflow_dependents("daily-import", "extract")
    page = list_workflows(None, 50)

    assert index_node.state == "completed"
    assert prerequisites == ["customers", "orders"]
    assert downstream == ["customers", "orders"]
    assert [w.workflow_id for w in page.items] == ["daily-import"]
    assert graph.coordinator_state == "completed"


@pytest.mark.django_db
def test_long_running_stage_with_a_named_cursor_step():
    enqueue(
        Workflow("import")
        .add("pages", tasks.wf_cursor_pages.envelope(pages=4), [])
        .add("index", index, ["pages"])
        .prepare()
    )
    run()
    assert [r.label for r in runs("import:pages")] == [f"page:{p}" for p in range(4)]
    assert job("import:pages").result == 4
    assert coordinator("import").state == "completed"


@pytest.mark.django_db
def test_durable_signal_with_payload_and_source():
    batch = (
        Workflow("onboarding:42")
        .add("prepare", prepare_job, [])
        .add_signal("approval", "approved", ["prepare"])
        .add("welcome", welcome_job, ["approval"])
        .prepare()
    )
    enqueue(batch)

    # Safe before or after `prepare` completes.
    receipt = emit_signal_with(
        "onboarding:42",
        SignalEmission(
            signal="approved",
            idempotency_key="approval:ticket-1842",
            payload={"approved": True, "reviewer": "Ada"},
            source={"emitter": "admin-api", "actor": "operator-42"},
        ),
    )
    assert receipt.matched == 1
    assert receipt.inserted

    history = list_signals("onboarding:42", None, 100)
    assert history[0].payload["reviewer"] == "Ada"
    assert history[0].source == {"emitter": "admin-api", "actor": "operator-42"}

    run()
    assert node_states("onboarding:42") == dict.fromkeys(
        ["prepare", "approval", "welcome"], "completed"
    )


@pytest.mark.django_db
def test_absolute_and_relative_timers():
    release_at_ms = ms(store.db_now()) + 200
    batch = (
        Workflow("release:42")
        .add("prepare", prepare_job, [])
        .add_timer_at("release-window", release_at_ms, ["prepare"])
        .add("publish", publish_job, ["release-window"])
        .prepare()
    )
    delayed = (
        Workflow("follow-up:42")
        .add("prepare", prepare_job, [])
        .add_timer_after("cooldown", timedelta(seconds=30 * 60), ["prepare"])
        .add("notify", notify_job, ["cooldown"])
        .prepare()
    )
    enqueue(batch)
    enqueue(delayed)
    testing.run_jobs()
    cooldown = job("follow-up:42:cooldown")
    anchor = ms(job("follow-up:42:prepare").finalized_at)
    assert ms(cooldown.scheduled_at) == anchor + 30 * 60 * 1000

    run()  # time travel: due timers run now
    assert coordinator("release:42").state == "completed"
    assert coordinator("follow-up:42").state == "completed"


@pytest.mark.django_db
def test_cel_wait():
    workflow = (
        Workflow("approval:42")
        .add("prepare", prepare_job, [])
        .add_condition(
            "eligible",
            "completed.prepare && states.prepare == 'completed'",
            ["prepare"],
        )
    )
    enqueue(workflow.prepare())
    run()
    assert node_states("approval:42") == {"prepare": "completed", "eligible": "completed"}
    assert coordinator("approval:42").state == "completed"


@pytest.mark.django_db
def test_graph_graft():
    enqueue(
        Workflow("onboarding:42")
        .add("create-account", account_job, [])
        .add("send-welcome", welcome_job, ["create-account"])
        .add_signal("closed", "closed", ["send-welcome"])
        .prepare()
    )
    run()

    graft = (
        WorkflowGraft("onboarding:42", 1)
        .queue("workflows")
        .add("send-survey", survey_job, ["send-welcome"])
        .prepare()
    )
    enqueue(graft)

    # Revision 1 is the initial graph, so this batch requests revision 2.
    assert graft.receipt_job_id == "onboarding:42:graft:2"
    emit_signal_with("onboarding:42", SignalEmission("closed", "close-1"))
    run()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.revision == 2
    assert snapshot.node("send-survey").state == "completed"
    assert snapshot.coordinator_state == "completed"


@pytest.mark.django_db
def test_failed_subgraph_retry():
    email_job = replace(tasks.fail_times.envelope(times=1), max_attempts=1)
    batch = (
        Workflow("onboarding:42")
        .failed_subgraph_retry()
        .add("create-account", account_job, [])
        .add("send-welcome", email_job, ["create-account"])
        .prepare()
    )
    enqueue(batch)
    run()

    # The failed coordinator checkpoint currently says revision 1.
    retry = request_failed_subgraph_retry("onboarding:42", 1)
    assert retry.generation == 2

    run()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.coordinator_state == "completed"
    assert (snapshot.revision, snapshot.generation) == (2, 2)
    assert len(runs("onboarding:42:create-account")) == 1


@pytest.mark.django_db
def test_retry_with_a_replacement_payload():
    # The guide's curl body, with the payload in this library's call format (the guide's
    # {"email": ...} bytes are Headgate's own payload encoding).
    payload = base64.b64encode(encode_call((), {"email": "new@example.com"})).decode()
    body = json.loads(
        '{"expected_revision": 1, "recoveries": [{"node": "send-welcome", '
        f'"payload": "{payload}", "schema_version": 2}}]}}'
    )
    broken = replace(tasks.versioned.envelope(email="old@example.com"), schema_version=3)
    enqueue(
        Workflow("onboarding:42")
        .failed_subgraph_retry()
        .add("create-account", account_job, [])
        .add("send-welcome", broken, ["create-account"])
        .prepare()
    )
    run()
    assert node_states("onboarding:42")["send-welcome"] == "undecodable"

    request_failed_subgraph_retry("onboarding:42", body["expected_revision"], body["recoveries"])
    run()
    assert coordinator("onboarding:42").state == "completed"
    assert job("onboarding:42:send-welcome").result == {"email": "new@example.com"}


@pytest.mark.django_db
def test_child_workflow_bundle():
    child = Workflow("billing:42").add("charge", charge_job, [])

    parent = (
        Workflow("checkout:42")
        .add_child("billing", "billing:42", [])
        .add("receipt", receipt_job, ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))

    run()
    assert coordinator("billing:42").state == "completed"
    assert coordinator("checkout:42").state == "completed"
    assert node_states("checkout:42") == {"billing": "completed", "receipt": "completed"}

"""Failed-subgraph retry: a new generation of the same graph that reruns only the failed
nodes and what they blocked; automatic retry with a generation limit; repairs of
quarantined and undecodable nodes."""

from __future__ import annotations

import base64
import threading
from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from headgate_django import DefinitionError, RevisionConflictError, enqueue, store, testing
from headgate_django.envelope import encode_call
from headgate_django.exceptions import InvalidTransitionError
from headgate_django.models import Job, Quarantine
from headgate_django.workflows import (
    Recovery,
    Workflow,
    inspect_workflow,
    prepare_bundle,
    request_failed_subgraph_retry,
)
from tests.app import tasks
from tests.conformance.helpers import wait_for_lock_wait
from tests.workflows.helpers import (
    checkpoint,
    claim,
    coordinator,
    event_names,
    expire_lease,
    job,
    job_state,
    node_states,
    run,
    run_counts,
    runs,
)


def once_failing():
    """Fails its first execution (in any generation) and succeeds afterwards."""
    return replace(tasks.fail_times.envelope(times=1), max_attempts=1)


def onboarding(send_welcome=None) -> Workflow:
    return (
        Workflow("onboarding:42")
        .failed_subgraph_retry()
        .add("create-account", tasks.record_run.envelope(label="create-account"), [])
        .add("send-welcome", send_welcome or once_failing(), ["create-account"])
        .add("after", tasks.record_run.envelope(label="after"), ["send-welcome"])
    )


def failed_onboarding(send_welcome=None) -> None:
    enqueue(onboarding(send_welcome).prepare())
    run()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.coordinator_state == "archived"
    assert (snapshot.revision, snapshot.generation, snapshot.failed) == (1, 1, True)


@pytest.mark.django_db
def test_a_failed_node_retried_once_reruns_only_the_failed_subgraph():
    failed_onboarding()
    assert node_states("onboarding:42") == {
        "create-account": "completed",
        "send-welcome": "archived",
        "after": "pending",  # kept (not deleted) for the next generation
    }
    retry = request_failed_subgraph_retry("onboarding:42", 1)
    assert (retry.revision, retry.generation) == (2, 2)
    assert retry.receipt_job_id == "onboarding:42:retry:2"

    run()
    snapshot = inspect_workflow("onboarding:42")
    assert snapshot.coordinator_state == "completed"
    assert (snapshot.revision, snapshot.generation) == (2, 2)
    assert run_counts("onboarding:42:") == Counter(
        {
            "onboarding:42:create-account": 1,  # the completed ancestor never reran
            "onboarding:42:send-welcome": 2,
            "onboarding:42:after": 1,
        }
    )
    # The descendant resumed only after the retried node succeeded.
    assert runs("onboarding:42:after")[0].id > runs("onboarding:42:send-welcome")[-1].id
    assert job_state("onboarding:42:retry:2") == "completed"
    events = event_names("onboarding:42")
    assert events.index("workflow_failed") < events.index("workflow_retry_accepted")
    assert events[-1] == "workflow_succeeded"


@pytest.mark.django_db
def test_the_new_generation_is_checkpointed_with_the_reopened_nodes():
    failed_onboarding()
    request_failed_subgraph_retry("onboarding:42", 1)
    assert testing.run_one(queues=["headgate-workflow"])[0] == "onboarding:42:coordinator"
    row = checkpoint("onboarding:42")
    assert (row.revision, row.generation, row.failed) == (2, 2, False)
    assert row.history[-1]["event"] != "workflow_failed"
    retried = [e for e in row.history if e["event"] == "workflow_retry_accepted"]
    assert [(e["revision"], e["generation"], e["nodes"]) for e in retried] == [
        (2, 2, ["send-welcome"])
    ]
    assert job_state("onboarding:42:send-welcome") in {"pending", "available"}
    assert job("onboarding:42:create-account").state == "completed"


@pytest.mark.django_db
def test_a_retry_request_reads_no_nodes_payload_or_result():
    # It read every node's whole row: the payloads, results, outputs and logs of up to 999
    # jobs held at once (a result may be 32 MiB), tens of GB for one HTTP request.
    failed_onboarding()
    node_ids = [f"onboarding:42:{n}" for n in ("create-account", "send-welcome", "after")]
    with CaptureQueriesContext(connection) as queries:
        request_failed_subgraph_retry("onboarding:42", 1)
    heavy = [
        q["sql"]
        for q in queries.captured_queries
        if any(i in q["sql"] for i in node_ids) and ("result" in q["sql"] or "payload" in q["sql"])
    ]
    assert heavy == []
    assert job_state("onboarding:42:send-welcome") == "archived"  # reopened by the coordinator
    run()
    assert inspect_workflow("onboarding:42").coordinator_state == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_retry_racing_another_one_is_told_the_workflow_is_no_longer_failed():
    # The second request read the coordinator before the first committed, then failed at
    # reopening it with "a available job cannot take 'operator_retry'" (PostgreSQL).
    if connection.vendor == "sqlite":
        pytest.skip("SQLite runs one writing transaction at a time: the requests cannot overlap")
    failed_onboarding()
    outcome: list[object] = []

    def second() -> None:
        try:
            outcome.append(request_failed_subgraph_retry("onboarding:42", 1))
        except Exception as exc:  # recorded for the assertions below
            outcome.append(exc)
        finally:
            connections.close_all()

    with transaction.atomic():
        first = request_failed_subgraph_retry("onboarding:42", 1)
        thread = threading.Thread(target=second)
        thread.start()
        wait_for_lock_wait()  # the second request waits for this transaction
    thread.join()
    assert first.generation == 2
    (error,) = outcome
    assert isinstance(error, InvalidTransitionError)
    assert "only a failed (archived) workflow can be retried" in str(error)
    assert job_state("onboarding:42:retry:2") == "pending"


@pytest.mark.django_db
def test_a_wrong_revision_is_a_conflict_and_changes_nothing():
    failed_onboarding()
    for revision in (0, 2):
        with pytest.raises(RevisionConflictError) as info:
            request_failed_subgraph_retry("onboarding:42", revision)
        assert "revision conflict" in str(info.value)
    assert coordinator("onboarding:42").state == "archived"
    assert job_state("onboarding:42:retry:2") is None
    request_failed_subgraph_retry("onboarding:42", 1)
    # A second request on the same revision: the workflow is no longer failed.
    with pytest.raises(InvalidTransitionError):
        request_failed_subgraph_retry("onboarding:42", 1)


@pytest.mark.django_db
def test_retry_needs_the_option_and_a_failed_workflow():
    enqueue(
        Workflow("plain")
        .add("a", replace(tasks.always_fail.envelope(), max_attempts=1), [])
        .prepare()
    )
    run()
    with pytest.raises(DefinitionError):
        request_failed_subgraph_retry("plain", 1)
    enqueue(onboarding().prepare())
    with pytest.raises(InvalidTransitionError):
        request_failed_subgraph_retry("onboarding:42", 1)  # still running


@pytest.mark.django_db
def test_automatic_retry_stops_at_max_generations():
    enqueue(
        Workflow("auto")
        .automatic_retry(3, timedelta(milliseconds=10))
        .add("root", tasks.record_run.envelope(label="root"), [])
        .add("flaky", replace(tasks.fail_times.envelope(times=99), max_attempts=1), ["root"])
        .prepare()
    )
    run()
    snapshot = inspect_workflow("auto")
    assert snapshot.coordinator_state == "archived"
    assert snapshot.generation == 3
    assert snapshot.retry_policy == {"max_generations": 3, "backoff_ms": 10}
    assert run_counts("auto:") == Counter({"auto:root": 1, "auto:flaky": 3})
    events = event_names("auto")
    assert events.count("automatic_retry_scheduled") == 2
    assert events.count("workflow_retry_accepted") == 2
    assert events.count("workflow_failed") == 1 and events[-1] == "workflow_failed"


@pytest.mark.django_db
@override_settings(HEADGATE={"COORDINATOR_POLL": timedelta(milliseconds=1)})
def test_automatic_retry_backs_off_through_the_store_timed_snooze():
    enqueue(
        Workflow("auto")
        .automatic_retry(2, timedelta(hours=1))
        .add("flaky", once_failing(), [])
        .prepare()
    )
    testing.run_jobs()  # the node fails; the retry is due in an hour
    row = coordinator("auto")
    assert row.state == "scheduled"
    assert row.attempt == 0  # a snooze, not a failed attempt
    now = store.db_now()
    assert now + timedelta(minutes=59) < row.scheduled_at <= now + timedelta(hours=1)
    assert event_names("auto")[-1] == "automatic_retry_scheduled"
    run()
    assert inspect_workflow("auto").coordinator_state == "completed"
    assert inspect_workflow("auto").generation == 2


def _quarantine(job_id: str) -> None:
    claimed = claim("fragile")
    assert claimed.ref.job_id == job_id
    expire_lease(job_id)
    with override_settings(HEADGATE={"CRASH_LIMIT": 1}):
        store.job_reclaim_expired()
    assert job_state(job_id) == "quarantined"


@pytest.mark.django_db
def test_a_quarantined_node_needs_an_explicit_release():
    enqueue(onboarding(replace(tasks.record_run.envelope(label="w"), queue="fragile")).prepare())
    testing.run_jobs(queues=["headgate-workflow", "default"])
    _quarantine("onboarding:42:send-welcome")
    run()
    assert coordinator("onboarding:42").state == "archived"

    with pytest.raises(InvalidTransitionError) as info:
        request_failed_subgraph_retry("onboarding:42", 1)
    assert "quarantined" in str(info.value)
    with pytest.raises(DefinitionError):
        request_failed_subgraph_retry("onboarding:42", 1, [Recovery("send-welcome")])
    assert job_state("onboarding:42:send-welcome") == "quarantined"  # nothing applied
    assert coordinator("onboarding:42").state == "archived"
    assert Quarantine.objects.count() == 1

    request_failed_subgraph_retry(
        "onboarding:42", 1, [Recovery("send-welcome", release_quarantine=True)]
    )
    assert not Quarantine.objects.exists()
    run()
    assert inspect_workflow("onboarding:42").coordinator_state == "completed"
    assert run_counts("onboarding:42:")["onboarding:42:create-account"] == 1


@pytest.mark.django_db
def test_an_undecodable_node_needs_a_replacement_payload_and_schema_version():
    # Version 3 is newer than the handler's schema (2): undecodable on arrival.
    broken = replace(tasks.versioned.envelope(email="old@example.com"), schema_version=3)
    failed_onboarding(broken)
    assert job_state("onboarding:42:send-welcome") == "undecodable"

    with pytest.raises(InvalidTransitionError) as info:
        request_failed_subgraph_retry("onboarding:42", 1)
    assert "undecodable" in str(info.value)
    payload = encode_call((), {"email": "new@example.com"})
    for incomplete in (
        Recovery("send-welcome"),
        Recovery("send-welcome", payload=payload),
        Recovery("send-welcome", payload=payload, schema_version=0),
    ):
        with pytest.raises(DefinitionError):
            request_failed_subgraph_retry("onboarding:42", 1, [incomplete])
    assert job("onboarding:42:send-welcome").schema_version == 3  # nothing applied

    # The control API's shape: base64 payload and a positive schema_version.
    recovery = {
        "node": "send-welcome",
        "payload": base64.b64encode(payload).decode(),
        "schema_version": 2,
    }
    request_failed_subgraph_retry("onboarding:42", 1, [recovery])
    run()
    assert inspect_workflow("onboarding:42").coordinator_state == "completed"
    assert job("onboarding:42:send-welcome").result == {"email": "new@example.com"}
    assert run_counts("onboarding:42:")["onboarding:42:create-account"] == 1


@pytest.mark.django_db
def test_a_parent_retry_first_retries_its_failed_child_workflow():
    child = Workflow("billing:42").failed_subgraph_retry().add("charge", once_failing(), [])
    parent = (
        Workflow("checkout:42")
        .failed_subgraph_retry()
        .add_child("billing", "billing:42", [])
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    run()
    assert coordinator("billing:42").state == "archived"
    assert coordinator("checkout:42").state == "archived"
    assert node_states("checkout:42") == {"billing": "archived", "receipt": "pending"}

    request_failed_subgraph_retry("checkout:42", 1)
    assert job_state("billing:42:retry:2") == "pending"  # the child's own retry receipt
    run()
    assert inspect_workflow("billing:42").generation == 2
    assert inspect_workflow("billing:42").coordinator_state == "completed"
    assert inspect_workflow("checkout:42").coordinator_state == "completed"
    assert [r.label for r in runs("checkout:42:receipt")] == ["receipt"]
    assert Job.objects.get(pk="checkout:42:billing").state == "completed"


@pytest.mark.django_db
def test_an_automatic_parent_retry_first_retries_its_failed_child_workflow():
    child = Workflow("billing:43").failed_subgraph_retry().add("charge", once_failing(), [])
    parent = (
        Workflow("checkout:43")
        .automatic_retry(3, timedelta(milliseconds=10))
        .add_child("billing", "billing:43", [])
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    for _ in range(4):  # the parent's backoff snoozes are due at once in run()
        run()
    assert inspect_workflow("billing:43").generation == 2
    assert inspect_workflow("billing:43").coordinator_state == "completed"
    parent_snapshot = inspect_workflow("checkout:43")
    assert (parent_snapshot.coordinator_state, parent_snapshot.generation) == ("completed", 2)
    assert [r.label for r in runs("checkout:43:receipt")] == ["receipt"]


@pytest.mark.django_db
def test_an_automatic_retry_leaves_a_child_that_cannot_be_retried_failed():
    child = Workflow("billing:44").add("charge", once_failing(), [])  # no failed_subgraph_retry
    parent = (
        Workflow("checkout:44")
        .automatic_retry(2, timedelta(milliseconds=10))
        .add_child("billing", "billing:44", [])
        .add("receipt", tasks.record_run.envelope(label="receipt"), ["billing"])
    )
    enqueue(prepare_bundle([parent, child]))
    for _ in range(4):
        run()
    assert inspect_workflow("billing:44").coordinator_state == "archived"
    assert inspect_workflow("checkout:44").coordinator_state == "archived"
    assert event_names("checkout:44")[-1] == "workflow_failed"


@pytest.mark.django_db
def test_grafted_nodes_are_repaired_and_checked_like_the_others():
    from headgate_django.workflows import SignalEmission, WorkflowGraft, emit_signal_with

    enqueue(
        Workflow("grown")
        .failed_subgraph_retry()
        .add("a", tasks.record_run.envelope(label="a"), [])
        .add_signal("hold", "done", ["a"])
        .prepare()
    )
    run()
    fragile = replace(tasks.record_run.envelope(label="b"), queue="fragile")
    enqueue(WorkflowGraft("grown", 1).add("b", fragile, ["a"]).prepare())
    testing.run_jobs(queues=["headgate-workflow"], include_scheduled=True)  # accepted
    _quarantine("grown:b")
    emit_signal_with("grown", SignalEmission("done", "done"))
    run()
    assert coordinator("grown").state == "archived"
    assert node_states("grown")["b"] == "quarantined"

    with pytest.raises(InvalidTransitionError):
        request_failed_subgraph_retry("grown", 2)
    request_failed_subgraph_retry("grown", 2, [Recovery("b", release_quarantine=True)])
    run()
    snapshot = inspect_workflow("grown")
    assert snapshot.coordinator_state == "completed"
    assert (snapshot.revision, snapshot.generation) == (3, 2)
    assert run_counts("grown:") == Counter({"grown:a": 1, "grown:b": 1})

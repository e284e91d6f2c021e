"""Internal kinds (``headgate:…``) are made only by the library's own builders, and the
generic job verbs refuse internal jobs, naming the verb of the job's owner. Each refusal
is an ``InternalKindError`` (422) and writes nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from headgate_django import Envelope, InternalKindError, durable, enqueue, store, task, testing
from headgate_django.envelope import encode_call
from headgate_django.kernel import names
from headgate_django.models import Job
from headgate_django.registry import TaskDef, find_task, get_task, register
from headgate_django.workflows import Workflow, WorkflowGraft
from tests.app import tasks

pytestmark = pytest.mark.django_db

INTERNAL_KINDS = [
    names.COORDINATOR_KIND,
    names.SIGNAL_KIND,
    names.TIMER_KIND,
    names.CONDITION_KIND,
    names.CHILD_KIND,
    names.GRAFT_KIND,
    names.RETRY_KIND,
    names.DURABLE_TASK_KIND,
    names.DURABLE_OP_KIND,
    "headgate:a-kind-no-version-has-yet",
]
GRAPH = {"workflow_id": "forged", "nodes": [{"name": "a", "job_id": "forged:a"}]}


@pytest.fixture
def no_new_rows():
    before = Job.objects.count()
    yield
    assert Job.objects.count() == before


# -- the ways in -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", INTERNAL_KINDS)
def test_a_hand_made_envelope_of_an_internal_kind_is_refused(kind, no_new_rows):
    forged = Envelope(kind=kind, id="forged:coordinator", payload=encode_call((), {"graph": GRAPH}))
    with pytest.raises(InternalKindError) as info:
        enqueue(forged)
    assert (info.value.status_code, info.value.default_code) == (422, "internal_kind")
    assert info.value.details["kind"] == kind


def test_a_batch_holding_one_internal_envelope_writes_nothing(no_new_rows):
    with pytest.raises(InternalKindError):
        enqueue([tasks.echo.envelope(), Envelope(kind=names.COORDINATOR_KIND)])


def test_a_changed_copy_of_a_prepared_coordinator_is_refused(no_new_rows):
    batch = Workflow("copied").add("a", tasks.echo.envelope()).prepare()
    forged = replace(batch.envelopes[0], payload=encode_call((), {"graph": GRAPH}))
    with pytest.raises(InternalKindError):
        enqueue([forged, *batch.envelopes[1:]])


def test_the_librarys_own_builders_still_make_internal_jobs():
    enqueue(
        Workflow("built")
        .add_signal("approval", "approved")
        .add_timer_at("deadline", 4_000_000_000_000)
        .add("send", tasks.echo.envelope(), ["approval"])
        .prepare()
    )
    durable.Client().start("ik-unsure-call", "1", None)
    kinds = set(Job.objects.values_list("kind", flat=True))
    assert {names.COORDINATOR_KIND, names.SIGNAL_KIND, names.TIMER_KIND} <= kinds
    assert names.DURABLE_TASK_KIND in kinds


def test_a_workflow_node_cannot_be_an_internal_kind():
    with pytest.raises(InternalKindError) as info:
        Workflow("w").add("sneaky", Envelope(kind=names.TIMER_KIND))
    assert info.value.node == "sneaky"


def test_a_graft_cannot_carry_an_internal_kind():
    enqueue(Workflow("grown").add_signal("approval", "approved").prepare())
    before = Job.objects.count()
    graft = WorkflowGraft("grown", 1).add("sneaky", Envelope(kind=names.COORDINATOR_KIND))
    with pytest.raises(InternalKindError):
        enqueue(graft.prepare())
    assert Job.objects.count() == before


def test_a_task_cannot_take_an_internal_kind():
    with pytest.raises(InternalKindError):

        @task(kind="headgate:mine")
        def mine(ctx):
            return None

    assert find_task("headgate:mine") is None
    coordinate = find_task(names.COORDINATOR_KIND)
    with pytest.raises(InternalKindError):
        register(TaskDef(fn=lambda ctx: None, kind=names.COORDINATOR_KIND))
    assert find_task(names.COORDINATOR_KIND) is coordinate  # not replaced


def test_an_internal_kinds_definition_makes_no_envelope(no_new_rows):
    coordinate = find_task(names.COORDINATOR_KIND)
    assert coordinate is not None
    with pytest.raises(InternalKindError):
        coordinate.envelope(graph=GRAPH)
    with pytest.raises(InternalKindError):
        coordinate.enqueue(graph=GRAPH)
    with pytest.raises(InternalKindError):
        get_task(names.COORDINATOR_KIND)  # the HTTP API's way in


# -- the generic job verbs ---------------------------------------------------------------


@durable.operation("ik-unsure", version="1")
def unsure(ctx: Any, _: Any) -> Any:
    raise durable.Uncertain("the bank did not answer")


@durable.workflow("ik-unsure-call", version="1")
def unsure_call(ctx: durable.Context, _: Any) -> Any:
    return ctx.execute_operation("ik-unsure", "1", None).result()


VERBS = {
    "delete": store.job_delete,
    "retry": store.job_operator_retry,
    "cancel": store.job_cancel,
    "promote": store.job_promote,
    "reschedule": lambda job_id: store.job_reschedule(job_id, delay=timedelta(hours=1)),
    "payload replacement": lambda job_id: store.job_replace_payload(job_id, payload=b"{}"),
}
COLUMNS = ("id", "kind", "state", "payload", "attempt", "fence", "scheduled_at", "checkpoint")


def internal_jobs() -> dict[str, str]:
    """One job of each kind an owner drives, in the state its owner leaves it; → the owner's
    verb the refusal must name."""
    enqueue(
        Workflow("owned")
        .add_signal("approval", "approved")
        .add_timer_at("deadline", 4_000_000_000_000)
        .add_condition("check", "true", ["approval"])
        .add("send", tasks.echo.envelope(), ["check"])
        .prepare()
    )
    testing.run_jobs()  # the coordinator's first tick: it waits for the signal
    enqueue(WorkflowGraft("owned", 1).add("extra", tasks.echo.envelope(), ["send"]).prepare())
    execution = durable.Client().start("ik-unsure-call", "1", None).workflow_id
    for _ in range(3):  # the pass, the Operation (uncertain), the suspended pass
        testing.run_jobs()
    assert durable.Manager().get(execution).state == "suspended"
    return {
        "owned:coordinator": "cancel_workflow",
        "owned:approval": "emit_signal",
        "owned:deadline": "request_failed_subgraph_retry",
        "owned:check": "cancel_workflow",
        "owned:graft:2": "workflow_events",
        f"{execution}:task": "durable.Manager().cancel",
        f"{execution}:op:1": "resolve_uncertain",
    }


def snapshot() -> list[tuple[Any, ...]]:
    return [
        tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
        for row in Job.objects.order_by("id").values_list(*COLUMNS)
    ]


@pytest.mark.parametrize("verb", VERBS)
def test_the_generic_verbs_refuse_internal_jobs_and_name_the_owners_verb(verb):
    owners = internal_jobs()
    before = snapshot()
    kinds = dict(Job.objects.filter(pk__in=list(owners)).values_list("id", "kind"))
    assert len(kinds) == len(owners)
    for job_id, owner_verb in owners.items():
        with pytest.raises(InternalKindError) as info:
            VERBS[verb](job_id)
        assert info.value.details == {"kind": kinds[job_id], "id": job_id, "verb": verb}
        assert owner_verb in info.value.message, info.value.message
    assert snapshot() == before


def test_an_ordinary_task_node_keeps_its_generic_verbs():
    """Cancelling a node's job is how an operator fails a workflow by hand (documented in
    the coordinator's explanation); the node is the user's own job."""
    internal_jobs()
    assert store.job_cancel("owned:send") is True
    assert Job.objects.get(pk="owned:send").state == "cancelled"

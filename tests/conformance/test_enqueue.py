"""Enqueue: bad input is refused with a clear error and leaves nothing behind; ids and
unique keys are deduplicated by the store; enqueue joins the caller's transaction."""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta
from datetime import timezone as tz

import pytest
from django.db import IntegrityError, transaction
from django.test import override_settings
from django.utils import timezone

from headgate_django import Envelope, enqueue, store, task, testing
from headgate_django.exceptions import (
    BatchError,
    DefinitionError,
    DuplicateError,
    IdConflictError,
    InvalidKindError,
    PayloadError,
    PayloadTooLargeError,
)
from headgate_django.models import LIVE_JOB_STATES, Job
from headgate_django.registry import find_task, registered_kinds
from headgate_django.store.fenced import Completion
from tests.app import tasks
from tests.conformance.helpers import LONG, WORKER, claim, envelope, row, state_of

pytestmark = pytest.mark.django_db

BAD_KINDS = {
    "empty": "",
    "129-bytes": "k" * 129,
    "128-bytes-of-multibyte": "k" + "é" * 64,  # 129 bytes, 65 characters
    "bad-first-char": "-starts-with-dash",
    "space": "has space",
    "not-a-string": 42,
}


MINUS_5 = tz(timedelta(hours=-5))


@pytest.fixture
def no_new_rows():
    """Fails the test if anything was written, even partly."""
    before = Job.objects.count()
    yield
    assert Job.objects.count() == before


@pytest.mark.parametrize("kind", BAD_KINDS.values(), ids=BAD_KINDS.keys())
def test_invalid_kind_via_envelope(kind, no_new_rows):
    good = envelope()
    with pytest.raises(InvalidKindError):
        enqueue([good, Envelope(kind=kind)])


@pytest.mark.parametrize("kind", BAD_KINDS.values(), ids=BAD_KINDS.keys())
def test_invalid_kind_at_task_decoration(kind):
    with pytest.raises(InvalidKindError):

        @task(kind=kind)
        def handler(ctx):
            return None

    assert find_task(str(kind)) is None


def test_kind_at_the_byte_limit_is_accepted():
    kind = "k" * 128
    [job_id] = enqueue(Envelope(kind=kind))
    assert state_of(job_id) == "available"
    assert Job.objects.get(pk=job_id).kind == kind


def test_a_handler_without_a_context_argument_fails_at_decoration():
    with pytest.raises(DefinitionError, match="first argument"):

        @task(kind="test.conformance.no-ctx")
        def handler():
            return None

    assert find_task("test.conformance.no-ctx") is None


@override_settings(HEADGATE={"MAX_PAYLOAD_BYTES": 100})
def test_payload_over_the_limit():
    with pytest.raises(PayloadTooLargeError) as info:
        enqueue([envelope(), envelope(payload=b"x" * 101)])
    assert info.value.details == {"size": 101, "limit": 100}
    assert "MAX_PAYLOAD_BYTES" in str(info.value)
    assert Job.objects.count() == 0
    [job_id] = enqueue(envelope(payload=b"x" * 100))  # at the limit
    assert row(job_id)["payload"] == b"x" * 100


def test_non_json_arguments_fail_when_the_envelope_is_built(no_new_rows):
    with pytest.raises(PayloadError, match="JSON"):
        tasks.echo.envelope(value=object())
    with pytest.raises(PayloadError):
        tasks.echo.envelope(value=float("nan"))
    with pytest.raises(PayloadError):
        tasks.echo.enqueue(value={1, 2})


@task(kind="test.conformance.add")
def add(ctx, a: int, b: int = 0, *, scale: int = 1) -> int:
    return (a + b) * scale


@task(kind="test.conformance.anything")
def anything(ctx, *args, **kwargs) -> None:
    return None


@pytest.mark.parametrize(
    "args, kwargs, problem",
    [
        ((), {"a": 1, "c": 2}, "got an unexpected keyword argument 'c'"),
        ((), {}, "missing a required argument: 'a'"),
        ((1, 2, 3), {}, "too many positional arguments"),
        ((1,), {"a": 1}, "multiple values for argument 'a'"),
        ((1, 2, 3), {"scale": 2}, "too many positional arguments"),
    ],
)
def test_arguments_that_do_not_fit_the_handler_are_said_where_the_call_is_made(
    args, kwargs, problem, caplog
):
    """Warned, not refused (an envelope may be built before it is complete); the job is
    undecodable on its first attempt instead of failing every retry."""
    message = (
        f"test.conformance.add: the arguments do not fit add(ctx, a, b=0, *, scale=1): "
        f"{problem}; a job made so is undecodable when it runs"
    )
    assert add.misfit(list(args), kwargs) == message.split("; a job")[0]
    with caplog.at_level(logging.WARNING, logger="headgate_django"):
        job_id = add.enqueue(*args, **kwargs)
    assert [r.getMessage() for r in caplog.records] == [message]
    assert testing.run_one() == (job_id, "undecodable")
    assert row(job_id)["errors"][0]["error"] == message.split("; a job")[0]


def test_arguments_that_fit_are_enqueued_and_run():
    job_id = add.enqueue(2, b=3, scale=10)
    assert testing.run_one() == (job_id, "completed")
    assert row(job_id)["result"] == 50
    anything.enqueue(1, 2, x=3)
    tasks.noop.enqueue()


def test_duplicate_ids_in_one_batch(no_new_rows):
    with pytest.raises(IdConflictError, match="twice"):
        enqueue([envelope(id="same"), envelope(id="other"), envelope(id="same")])


def test_batch_over_the_limit(no_new_rows):
    with pytest.raises(BatchError, match="1001"):
        enqueue([Envelope(kind="test.noop")] * 1001)


def test_batch_at_the_limit():
    ids = enqueue([Envelope(kind="test.noop")] * 1000)
    assert len(set(ids)) == 1000
    assert Job.objects.count() == 1000


@pytest.mark.parametrize(
    "fields",
    [
        {"pending": True, "scheduled_at": datetime(2030, 1, 1, tzinfo=UTC)},
        {"pending": True, "delay": timedelta(minutes=1)},
        {"delay": timedelta(minutes=1), "scheduled_at": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
    ids=["pending+scheduled_at", "pending+delay", "delay+scheduled_at"],
)
def test_timing_options_are_exclusive(fields, no_new_rows):
    with pytest.raises(DefinitionError, match="exclusive"):
        enqueue([envelope(), envelope(**fields)])


def test_naive_datetime(no_new_rows):
    with pytest.raises(DefinitionError, match="timezone-aware"):
        enqueue([envelope(), envelope(scheduled_at=datetime(2030, 1, 1))])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"queue": "bad queue"}, "queue"),
        ({"id": ""}, "id"),
        ({"id": "x" * 256}, "255 bytes"),
        ({"id": "tab\there"}, "control"),
        ({"payload": "text"}, "bytes"),
        ({"priority": 2**31}, "priority"),
        ({"schema_version": 0}, "schema_version"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"retention": timedelta(seconds=-1)}, "retention"),
        ({"delay": timedelta(seconds=-1)}, "delay"),
        ({"unique_key": ""}, "unique_key"),
    ],
)
def test_other_bad_fields(fields, message, no_new_rows):
    with pytest.raises(DefinitionError, match=message):
        enqueue([envelope(), envelope(**fields)])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_attempts": 2**31}, "max_attempts"),
        ({"schema_version": 2**31}, "schema_version"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"priority": 1.5}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"schema_version": "2"}, "schema_version"),
        ({"retention": 5}, "retention"),
        ({"delay": 5}, "delay"),
        ({"timeout": 5}, "timeout"),
        ({"scheduled_at": "2030-01-01T00:00:00Z"}, "scheduled_at"),
        ({"unique_key": 5}, "unique_key"),
        ({"scheduled_at": datetime(9999, 12, 31, 23, tzinfo=MINUS_5)}, "scheduled_at"),
        ({"deadline": datetime(9999, 12, 31, 23, tzinfo=MINUS_5)}, "deadline"),
        ({"workflow_id": "w" * 256}, "workflow_id"),
        ({"workflow_id": "a\x00b"}, "workflow_id"),
        ({"workflow_id": 5}, "workflow_id"),
        ({"workflow_id": ""}, "workflow_id"),
    ],
    ids=[
        "max_attempts-huge",
        "schema_version-huge",
        "max_attempts-float",
        "priority-float",
        "priority-str",
        "schema_version-str",
        "retention-int",
        "delay-int",
        "timeout-int",
        "scheduled_at-str",
        "unique_key-int",
        "scheduled_at-year-10000-in-utc",
        "deadline-year-10000-in-utc",
        "workflow_id-256-bytes",
        "workflow_id-nul",
        "workflow_id-int",
        "workflow_id-empty",
    ],
)
def test_fields_of_the_wrong_type_or_out_of_the_columns_range(fields, message, no_new_rows):
    # Each was stored as given on SQLite (a float in an integer column), failed with a raw
    # database error on PostgreSQL or MariaDB, or raised TypeError, AttributeError or
    # OverflowError from inside the check.
    with pytest.raises(DefinitionError, match=message):
        enqueue([envelope(), envelope(**fields)])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"queue": "bad queue"}, "queue"),
        ({"priority": 2**31}, "priority"),
        ({"id": "tab\there"}, "control"),
        ({"delay": timedelta(seconds=-1)}, "delay"),
    ],
)
def test_a_changed_copy_of_a_tasks_envelope_is_checked_again(fields, message, no_new_rows):
    """A task's envelopes inherit the verdict on their template's fields; ``replace`` makes
    a new envelope, which must not."""
    good = tasks.echo.envelope(value=1)
    with pytest.raises(DefinitionError, match=message):
        enqueue(dataclasses.replace(good, **fields))
    with pytest.raises(DefinitionError, match=message):
        enqueue([tasks.echo.envelope(value=2), dataclasses.replace(good, **fields)])


def test_a_priority_out_of_range_fails_at_decoration():
    with pytest.raises(DefinitionError, match="priority"):

        @task(kind="test.too-urgent", priority=2**31)
        def handler(ctx):
            return None

    assert find_task("test.too-urgent") is None


def test_not_an_envelope(no_new_rows):
    with pytest.raises(DefinitionError, match="Envelope"):
        enqueue([envelope(), {"kind": "test.noop"}])


# -- caller ids ------------------------------------------------------------------------


def test_caller_id_reuse_with_the_same_content_is_idempotent():
    env = tasks.echo.envelope(value=1)
    first = enqueue(dataclasses.replace(env, id="order-42"))
    second = enqueue(dataclasses.replace(env, id="order-42"))
    assert first == second == ["order-42"]
    assert Job.objects.count() == 1


def test_caller_id_reuse_is_idempotent_even_after_the_job_ran():
    env = dataclasses.replace(tasks.echo.envelope(value=1), id="order-43")
    enqueue(env)
    testing.run_jobs()
    before = row("order-43")
    assert enqueue(env) == ["order-43"]
    assert row("order-43") == before


def test_caller_id_reuse_with_other_content_conflicts():
    enqueue(dataclasses.replace(tasks.echo.envelope(value=1), id="order-44"))
    before = row("order-44")
    for other in (
        tasks.echo.envelope(value=2),  # other payload
        tasks.noop.envelope(),  # other kind
        dataclasses.replace(tasks.echo.envelope(value=1), queue="elsewhere"),
    ):
        with pytest.raises(IdConflictError) as info:
            enqueue([envelope(), dataclasses.replace(other, id="order-44")])
        assert info.value.details == {"id": "order-44"}
    assert row("order-44") == before
    assert Job.objects.count() == 1


#: Ids that MySQL/MariaDB's usual collations (``utf8mb4_general_ci``, and any ``PAD SPACE``
#: one, ``utf8mb4_bin`` too) would take for one.
ALIKE_IDS = ("Order-47", "order-47", "ORDER-47", "order-47 ", "order-47  ")


def test_ids_differing_only_by_case_or_trailing_spaces_are_distinct_jobs():
    """On every database, as on PostgreSQL and SQLite: each id is its own job, found by its
    own id and by no other, and enqueuing it again is idempotent for that id alone."""

    def env(value: int, job_id: str) -> Envelope:
        return dataclasses.replace(tasks.echo.envelope(value=value), id=job_id)

    for i, job_id in enumerate(ALIKE_IDS):
        assert enqueue(env(i, job_id)) == [job_id]
    assert sorted(Job.objects.values_list("id", flat=True)) == sorted(ALIKE_IDS)
    for i, job_id in enumerate(ALIKE_IDS):
        assert row(job_id)["id"] == job_id
        assert enqueue(env(i, job_id)) == [job_id]  # the same content: the same job
        with pytest.raises(IdConflictError):  # other content: a conflict with that job only
            enqueue(env(i + 100, job_id))
    assert Job.objects.count() == len(ALIKE_IDS)
    assert [Job.objects.filter(pk=j).count() for j in ALIKE_IDS] == [1] * len(ALIKE_IDS)


def test_an_idempotent_id_in_a_batch_with_new_jobs_inserts_only_the_new_ones():
    env = dataclasses.replace(tasks.echo.envelope(value=1), id="order-45")
    enqueue(env)
    ids = enqueue([env, dataclasses.replace(env, id="order-46")])
    assert ids == ["order-45", "order-46"]
    assert sorted(Job.objects.values_list("id", flat=True)) == ["order-45", "order-46"]


# -- unique keys -----------------------------------------------------------------------


def test_unique_key_is_held_by_live_jobs_only():
    [holder] = enqueue(envelope(unique_key="report:2026-01"))
    with pytest.raises(DuplicateError) as info:
        enqueue([envelope(), envelope(unique_key="report:2026-01")])
    assert info.value.existing_id == holder
    held = claim(holder)
    with pytest.raises(DuplicateError) as info:
        enqueue(envelope(unique_key="report:2026-01"))
    assert info.value.existing_id == holder
    assert Job.objects.count() == 1
    store.job_complete_many([Completion(held.ref, None)])
    [again] = enqueue(envelope(unique_key="report:2026-01"))
    assert again != holder and state_of(again) == "available"
    assert state_of(holder) == "completed"


@pytest.mark.parametrize("state", ["pending", "scheduled", "retryable"])
def test_unique_key_is_held_while_waiting(state):
    fields = {"pending": {"pending": True}, "scheduled": {"delay": timedelta(hours=1)}}
    [holder] = enqueue(envelope(unique_key="k", **fields.get(state, {})))
    if state == "retryable":
        store.job_retry(claim(holder).ref, error="x", delay=timedelta(hours=1))
    assert state_of(holder) == state
    with pytest.raises(DuplicateError) as info:
        enqueue(envelope(unique_key="k"))
    assert info.value.existing_id == holder


def test_unique_key_twice_in_one_batch(no_new_rows):
    with pytest.raises(DuplicateError) as info:
        enqueue([envelope(id="a", unique_key="k"), envelope(id="b", unique_key="k")])
    assert info.value.existing_id == "a"


def _raw_row(job_id: str, state: str, unique_key: str) -> None:
    """A row written past the store, as a racing writer's would land."""
    Job.objects.create(
        id=job_id,
        kind="test.noop",
        fingerprint="f" * 32,
        state=state,
        lease_id="lease" if state == "running" else None,
        scheduled_at=timezone.now(),
        enqueued_at=timezone.now(),
        unique_key=unique_key,
    )


@pytest.mark.parametrize("state", sorted(LIVE_JOB_STATES))
def test_the_database_itself_refuses_a_second_live_holder(state):
    """The classifying path reports a held key; the index is what stops a writer that
    raced it, whatever the database."""
    [holder] = enqueue(envelope(unique_key="k"))
    with pytest.raises(IntegrityError), transaction.atomic():
        _raw_row("racer", state, "k")
    assert list(Job.objects.values_list("id", flat=True)) == [holder]


def test_finished_jobs_do_not_hold_their_key_in_the_database():
    for n, state in enumerate(["completed", "archived", "cancelled", "completed"]):
        _raw_row(f"done-{n}", state, "k")
    [live] = enqueue(envelope(unique_key="k"))
    assert Job.objects.filter(unique_key="k").count() == 5
    with pytest.raises(DuplicateError) as info:
        enqueue(envelope(unique_key="k"))
    assert info.value.existing_id == live


# -- transactions ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue_joins_the_callers_transaction():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        tasks.noop.enqueue()
        assert Job.objects.count() == 1  # visible inside the transaction
        raise Boom
    assert Job.objects.count() == 0
    with transaction.atomic():
        job_id = tasks.noop.enqueue()
    assert state_of(job_id) == "available"


@pytest.mark.django_db(transaction=True)
def test_a_refused_batch_does_not_poison_the_callers_transaction():
    with transaction.atomic():
        kept = tasks.noop.enqueue()
        with pytest.raises(DuplicateError):
            enqueue([envelope(unique_key="k"), envelope(unique_key="k")])
        enqueue(envelope(unique_key="k"))
        with pytest.raises(DuplicateError):
            enqueue(envelope(unique_key="k"))
    assert Job.objects.count() == 2 and state_of(kept) == "available"


# -- unknown kinds ---------------------------------------------------------------------


def test_unknown_kind_is_left_untouched_and_reported():
    [unknown] = enqueue(Envelope(kind="test.nobody-knows-me", queue="shared"))
    [known] = enqueue(Envelope(kind="test.noop", queue="shared", priority=-1))
    before = row(unknown)
    claimed = store.job_claim(worker_id=WORKER, limit=10, lease_ttl=LONG, kinds=registered_kinds())
    assert [c.ref.job_id for c in claimed] == [known]
    assert row(unknown) == before
    assert store.unknown_kinds_waiting(registered_kinds()) == {"test.nobody-knows-me": 1}
    assert store.unknown_kinds_waiting(registered_kinds(), queues=["shared"]) == {
        "test.nobody-knows-me": 1
    }
    # A worker of other queues is not told about it: the job is not its to run.
    assert store.unknown_kinds_waiting(registered_kinds(), queues=["elsewhere"]) == {}
    assert store.job_claim(worker_id=WORKER, limit=10, lease_ttl=LONG, kinds=[]) == []


def test_unknown_kinds_are_counted_each_up_to_a_cap_and_only_while_available(monkeypatch):
    from headgate_django.store import maintenance

    monkeypatch.setattr(maintenance, "UNKNOWN_COUNTED_UP_TO", 2)
    enqueue([Envelope(kind="test.zz-unknown") for _ in range(3)])
    enqueue(Envelope(kind="test.aa-unknown"))
    [finished] = enqueue(Envelope(kind="test.mm-unknown"))
    Job.objects.filter(pk=finished).update(state="completed")
    enqueue([Envelope(kind="test.noop") for _ in range(3)])
    # Kinds before, between and after the known ones are all found; a kind with no
    # available job is not reported, and each count stops at the cap.
    assert store.unknown_kinds_waiting(registered_kinds()) == {
        "test.aa-unknown": 1,
        "test.zz-unknown": 2,
    }
    assert store.unknown_kinds_waiting([]) == {
        "test.aa-unknown": 1,
        "test.noop": 2,
        "test.zz-unknown": 2,
    }


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"timeout": timedelta(days=10**8)}, "timeout"),
        ({"deadline": timedelta(days=10**8)}, "deadline"),
        ({"deadline": timedelta.max}, "deadline"),
        ({"unique_key": "k", "unique_window": timedelta(days=10**8)}, "unique_window"),
        ({"unique_key": "k", "unique_debounce": timedelta(days=10**8)}, "unique_debounce"),
    ],
    ids=["timeout", "deadline", "deadline-max", "unique_window", "unique_debounce"],
)
def test_a_span_past_the_year_9999_is_refused_and_nothing_is_stored(fields, name):
    # A deadline, throttle window or debounce is added to the store clock, as a delay is:
    # on SQLite the deadline became NULL (the job kept no deadline at all), elsewhere the
    # database failed or wrote a year far past 9999. A timeout is stored as a span.
    kept = tasks.noop.enqueue()
    too_long = dataclasses.replace(tasks.noop.envelope(), **fields)
    with pytest.raises(DefinitionError, match=f"{name} is at most 36500 days"):
        enqueue(too_long)
    assert list(Job.objects.values_list("id", flat=True)) == [kept]
    longest = {k: timedelta(days=36_500) if k == name else v for k, v in fields.items()}
    job_id = enqueue(dataclasses.replace(tasks.noop.envelope(), **longest))[0]
    assert Job.objects.filter(pk=job_id).exists()


@pytest.mark.parametrize("timeout", [timedelta(0), timedelta(seconds=-5)], ids=["zero", "neg"])
def test_a_timeout_that_is_not_positive_is_refused(timeout, no_new_rows):
    # ``@task`` refused it; an envelope's own timeout was stored, and a negative one timed
    # every attempt out at once.
    with pytest.raises(DefinitionError, match="timeout must be positive"):
        enqueue([envelope(), envelope(timeout=timeout)])


@pytest.mark.parametrize("field", ["delay", "retention"])
def test_a_delay_or_retention_past_the_year_9999_is_refused_and_nothing_is_stored(field):
    # The store adds either to its clock: NULL on SQLite, an overflow on MariaDB, and on
    # PostgreSQL a year Python cannot read back (the row broke every reader of it).
    kept = tasks.noop.enqueue()
    too_long = dataclasses.replace(tasks.noop.envelope(), **{field: timedelta(days=10**8)})
    with pytest.raises(DefinitionError, match=f"{field} is at most 36500 days"):
        enqueue([tasks.noop.envelope(), too_long])
    assert list(Job.objects.values_list("id", flat=True)) == [kept]
    longest = dataclasses.replace(tasks.noop.envelope(), **{field: timedelta(days=36_500)})
    assert len(enqueue(longest)) == 1

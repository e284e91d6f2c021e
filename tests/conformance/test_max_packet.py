"""MySQL/MariaDB's ``max_allowed_packet`` (16 MiB by default on MariaDB 10.11) is below the
default ``MAX_RESULT_BYTES`` (32 MiB): results between the two failed at the store with a raw
error 1153, which also ends the session, and a batched ack of many jobs could exceed it
with small results. A result too large for a statement now fails its attempt with the size
limit's error, and results written together are split into statements that fit."""

from __future__ import annotations

import pytest
from django.db import connection

from headgate_django import store, task, testing
from headgate_django.enqueue import enqueue
from headgate_django.exceptions import PayloadTooLargeError, ResultTooLargeError
from headgate_django.kernel.states import State
from headgate_django.models import Job
from headgate_django.store.fenced import Completion
from headgate_django.store.packet import max_packet
from tests.conformance.helpers import job_in_state, row

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "mysql", reason="max_allowed_packet: MySQL/MariaDB"),
]


def packet() -> int:
    size = max_packet(connection)
    assert size is not None
    return size


@task(kind="test.packet.returns-text", max_attempts=1)
def returns_text(ctx, n: int):
    return "x" * n


def result_length(job_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT LENGTH(result) FROM headgate_job WHERE id = %s", [job_id])
        return int(cursor.fetchone()[0])


def test_a_result_too_large_for_a_statement_fails_its_attempt_with_a_message():
    job_id = returns_text.enqueue(n=packet())  # under MAX_RESULT_BYTES (32 MiB)
    assert testing.run_one() == (job_id, "archived")
    after = row(job_id)
    assert after["state"] == "archived" and after["result"] is None
    error = after["errors"][-1]["error"]
    assert error.startswith("ResultTooLargeError: result is ") and "max_allowed_packet" in error
    # The session survived, and a result that fits is kept.
    small = returns_text.enqueue(n=1000)
    assert testing.run_one() == (small, "completed")
    assert result_length(small) == 1002


def test_results_too_large_together_are_written_in_statements_that_fit():
    half = packet() * 3 // 5  # two of these do not fit one statement
    first_id, first = job_in_state(State.RUNNING)
    second_id, second = job_in_state(State.RUNNING)
    bare_id, bare = job_in_state(State.RUNNING)
    done = store.job_complete_many(
        [
            Completion(first.ref, "a" * half),
            Completion(bare.ref),
            Completion(second.ref, "b" * half),
        ]
    )
    assert done == {first_id, second_id, bare_id}
    assert [result_length(i) for i in (first_id, second_id)] == [half + 2, half + 2]
    assert row(bare_id)["state"] == "completed"


def test_the_store_refuses_one_result_too_large_for_a_statement_and_nothing_lands():
    other_id, other = job_in_state(State.RUNNING)
    job_id, claimed = job_in_state(State.RUNNING)
    with pytest.raises(ResultTooLargeError, match="max_allowed_packet") as info:
        store.job_complete_many(
            [Completion(other.ref, "ok"), Completion(claimed.ref, "x" * packet())]
        )
    assert info.value.details["limit"] < packet()
    # Measured as sent: MySQLdb escapes JSON's quotes and backslashes (4 bytes for each '"').
    quotes = '"' * (packet() // 4)
    with pytest.raises(ResultTooLargeError, match="max_allowed_packet"):
        store.job_complete_many([Completion(claimed.ref, quotes)])
    assert (row(job_id)["state"], row(other_id)["state"]) == ("running", "running")


def test_an_effect_whose_result_is_too_large_for_a_statement_records_nothing():
    from headgate_django.store.effects import job_effect_once, job_effects

    job_id, claimed = job_in_state(State.RUNNING)
    with pytest.raises(ResultTooLargeError, match="max_allowed_packet"):
        job_effect_once(claimed.ref, "fetch", lambda: "x" * packet())
    assert job_effects(job_id) == []
    assert job_effect_once(claimed.ref, "fetch", lambda: "small") == "small"


@task(kind="test.packet.takes-text")
def takes_text(ctx, text: str):
    return None


def test_a_job_too_large_for_a_statement_is_refused_at_enqueue_and_nothing_lands(settings):
    # MAX_PAYLOAD_BYTES raised past the server's packet: the enqueue failed with a raw
    # error 1153 (which also ends the session) instead of the size limit's error.
    settings.HEADGATE = {"MAX_PAYLOAD_BYTES": 32 * 1024 * 1024}
    before = Job.objects.count()
    with pytest.raises(PayloadTooLargeError, match="max_allowed_packet") as info:
        takes_text.enqueue(text="x" * packet())
    assert info.value.details["limit"] < packet()
    # In a batch, the whole batch is refused: none of it lands.
    small, big = takes_text.envelope(text="ok"), takes_text.envelope(text="x" * packet())
    with pytest.raises(PayloadTooLargeError, match="max_allowed_packet"):
        enqueue([small, big])
    assert Job.objects.count() == before
    # Jobs that each fit go in, in statements that fit: a batch of two that would not fit
    # one statement together, and a single one as large as a statement allows.
    near = packet() * 3 // 5
    ids = enqueue([takes_text.envelope(text="a" * near), takes_text.envelope(text="b" * near)])
    assert Job.objects.filter(pk__in=ids).count() == 2
    assert takes_text.enqueue(text="c" * (packet() - 128 * 1024))


def test_a_database_outage_while_measuring_a_result_does_not_fail_the_job():
    """The size is measured against the packet the server reports, asked once per
    session; a worker whose session died with the database asks again, and that must not
    turn the handler's success into a failure (it ran the job a second time)."""
    from django.db import connections
    from django.db.utils import ConnectionHandler

    from headgate_django.worker.execute import Succeeded, result_outcome
    from tests.conftest import free_port

    # The test database's own settings, at a port nothing listens on: a database that is down.
    settings = {**connections.settings["default"], "HOST": "127.0.0.1", "PORT": free_port()}
    down = ConnectionHandler({"default": settings})["default"]
    try:
        assert result_outcome({"rows": 3}, down) == Succeeded(result={"rows": 3})
    finally:
        down.close()

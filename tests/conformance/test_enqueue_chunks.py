"""A batch larger than one statement should carry is written in chunks, in one transaction:
all of it or none, whichever chunk is refused, with the same precise errors as a small one.

The statements are counted, so a batch sent whole fails here even where the database
would take it; twenty 1 MiB payloads are more bytes than MariaDB accepts in one statement
(``max_allowed_packet``, 16 MiB by default), so there they would not go in at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from headgate_django import Envelope, enqueue
from headgate_django.exceptions import (
    DuplicateError,
    IdConflictError,
    PayloadTooLargeError,
    QuarantinedError,
)
from headgate_django.models import Job, Quarantine
from headgate_django.store import insert
from tests.app import tasks

pytestmark = pytest.mark.django_db(transaction=True)

LARGE = 25_000


@pytest.fixture(autouse=True)
def _large_batches():
    with override_settings(HEADGATE={"MAX_BATCH": LARGE}):
        yield


def _batch(n: int, **last: object) -> list[Envelope]:
    """``n`` plain jobs, the last one with ``last``'s fields."""
    plain = Envelope(kind="test.noop", queue="chunks")
    return [plain] * (n - 1) + [dataclasses.replace(plain, **last)]


@contextlib.contextmanager
def _counting_inserts() -> Iterator[list[str]]:
    """The job insert statements sent while the block runs: one per execution, and one per
    set of parameters of an ``executemany`` (PostgreSQL pipelines a batch's statements)."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):
        if not sql.startswith("INSERT INTO headgate_job"):
            return execute(sql, params, many, context)
        if not many:
            sent.append(sql)
            return execute(sql, params, many, context)

        def each() -> Iterator[object]:
            for one in params:
                sent.append(sql)
                yield one

        return execute(sql, each(), many, context)

    with connection.execute_wrapper(record):
        yield sent


def test_a_large_batch_is_stored_whole_in_chunks():
    with _counting_inserts() as inserts:
        ids = enqueue(_batch(LARGE))
    assert len(set(ids)) == LARGE
    # Statements of at most statement_rows jobs; on PostgreSQL the first is a smaller one.
    fewest = -(-LARGE // insert.statement_rows(connection.vendor))
    assert fewest <= len(inserts) <= fewest + (connection.vendor == "postgresql")
    assert Job.objects.filter(state="available").count() == LARGE
    assert set(Job.objects.values_list("id", flat=True)) == set(ids)


def test_a_unique_key_taken_in_the_last_chunk_stores_nothing():
    [holder] = enqueue(Envelope(kind="test.noop", unique_key="nightly"))
    with pytest.raises(DuplicateError) as info:
        enqueue(_batch(LARGE, unique_key="nightly"))
    assert info.value.existing_id == holder
    assert list(Job.objects.values_list("id", flat=True)) == [holder]


def test_a_quarantined_fingerprint_in_the_last_chunk_stores_nothing():
    bad = tasks.echo.envelope(value="poison")
    Quarantine.objects.create(
        fingerprint=bad.fingerprint, kind=bad.kind, quarantined_at=timezone.now()
    )
    with pytest.raises(QuarantinedError) as info:
        enqueue([*_batch(LARGE - 1), bad])
    assert info.value.fingerprint == bad.fingerprint
    assert Job.objects.count() == 0


def test_an_id_taken_with_other_content_in_the_last_chunk_stores_nothing(monkeypatch):
    monkeypatch.setattr(insert, "CHUNK_ROWS", 10)
    enqueue(dataclasses.replace(tasks.echo.envelope(value=1), id="taken"))
    with pytest.raises(IdConflictError) as info:
        enqueue([*_batch(95), dataclasses.replace(tasks.echo.envelope(value=2), id="taken")])
    assert info.value.details == {"id": "taken"}
    assert list(Job.objects.values_list("id", flat=True)) == ["taken"]


def test_an_idempotent_repeat_across_chunks_inserts_only_the_new_rows(monkeypatch):
    monkeypatch.setattr(insert, "CHUNK_ROWS", 10)
    first = [dataclasses.replace(tasks.echo.envelope(value=i), id=f"job-{i}") for i in range(35)]
    assert enqueue(first) == [f"job-{i}" for i in range(35)]
    again = [dataclasses.replace(tasks.echo.envelope(value=i), id=f"job-{i}") for i in range(50)]
    assert enqueue(again) == [f"job-{i}" for i in range(50)]
    assert Job.objects.count() == 50


def test_a_large_batch_joins_the_callers_transaction(monkeypatch):
    monkeypatch.setattr(insert, "CHUNK_ROWS", 10)
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue(_batch(45))
        assert Job.objects.count() == 45
        raise RuntimeError("the caller rolls back")
    assert Job.objects.count() == 0


def test_chunks_are_bounded_by_payload_bytes():
    big = Envelope(kind="test.noop", payload=b"x" * (1024 * 1024))
    batch = [dataclasses.replace(big, payload=bytes([i]) * len(big.payload)) for i in range(20)]
    with _counting_inserts() as inserts:
        ids = enqueue(batch)
    per_chunk = insert.CHUNK_BYTES // len(big.payload)
    assert len(inserts) == -(-len(batch) // per_chunk)
    stored = dict(Job.objects.values_list("id", "payload"))
    assert [bytes(stored[job_id])[:1] for job_id in ids] == [bytes([i]) for i in range(20)]


def test_a_refusal_after_a_chunk_of_large_payloads_stores_nothing():
    [holder] = enqueue(Envelope(kind="test.noop", unique_key="nightly"))
    big = Envelope(kind="test.noop", payload=b"x" * (1024 * 1024))
    with pytest.raises(DuplicateError):
        enqueue([big] * 8 + [dataclasses.replace(big, unique_key="nightly")])
    assert list(Job.objects.values_list("id", flat=True)) == [holder]


def test_every_row_of_a_mixed_batch_keeps_its_own_values(monkeypatch):
    """Rows of several shapes, with and without keys and partitions, with payloads of
    every length (none too), across chunks: each stored exactly as its envelope says."""
    monkeypatch.setattr(insert, "CHUNK_ROWS", 7)
    batch = []
    for i in range(40):
        env = (
            tasks.echo.envelope(value="x" * (i * 37 % 11))
            if i % 3
            else Envelope(kind="test.noop", payload=b"")
        )
        batch.append(
            dataclasses.replace(
                env,
                queue=f"q{i % 4}",
                priority=i % 5,
                unique_key=f"key-{i}" if i % 4 == 1 else None,
                partition_key=f"tenant-{i % 3}" if i % 5 == 2 else "",
                pending=i % 7 == 3,
            )
        )
    ids = enqueue(batch)
    stored = {
        job["id"]: job
        for job in Job.objects.values(
            "id",
            "kind",
            "queue",
            "priority",
            "payload",
            "fingerprint",
            "unique_key",
            "partition_key",
            "state",
        )
    }
    assert len(stored) == len(batch)
    for job_id, env in zip(ids, batch, strict=True):
        job = stored[job_id]
        assert (job["kind"], job["queue"], job["priority"]) == (env.kind, env.queue, env.priority)
        assert bytes(job["payload"]) == env.payload
        assert job["fingerprint"] == env.fingerprint
        assert job["unique_key"] == env.unique_key
        assert job["partition_key"] == env.partition_key
        assert job["state"] == ("pending" if env.pending else "available")


def test_a_payload_over_the_limit_late_in_a_batch_stores_nothing():
    """On PostgreSQL the batch's first statements are sent before its last rows are checked;
    the refusal still leaves nothing of the batch, and the caller's transaction goes on."""
    batch = _batch(1000, payload=b"x" * 101)
    with override_settings(HEADGATE={"MAX_BATCH": LARGE, "MAX_PAYLOAD_BYTES": 100}):
        with transaction.atomic():
            [before] = enqueue(Envelope(kind="test.noop"))
            with pytest.raises(PayloadTooLargeError):
                enqueue(batch)
            [after] = enqueue(Envelope(kind="test.noop"))
        with pytest.raises(PayloadTooLargeError):
            enqueue(batch)
    assert set(Job.objects.values_list("id", flat=True)) == {before, after}


def test_keys_and_partitions_only_in_a_later_statement_are_stored(monkeypatch):
    """Statements of one batch differ in what they bind (no keys, then keys): each is
    stored as its envelopes say, whichever statement of the batch carries it."""
    monkeypatch.setattr(insert, "CHUNK_ROWS", 10)
    plain = [Envelope(kind="test.noop", queue="chunks")] * 20
    keyed = [
        Envelope(kind="test.noop", queue="chunks", unique_key=f"k{i}", partition_key=f"t{i % 2}")
        for i in range(10)
    ]
    ids = enqueue([*plain, *keyed, *plain])
    stored = dict(Job.objects.values_list("id", "unique_key"))
    parts = dict(Job.objects.values_list("id", "partition_key"))
    assert [stored[i] for i in ids] == [None] * 20 + [f"k{i}" for i in range(10)] + [None] * 20
    assert [parts[i] for i in ids] == [""] * 20 + [f"t{i % 2}" for i in range(10)] + [""] * 20


def test_a_refusal_in_the_first_statement_of_a_long_batch_stores_nothing():
    """On PostgreSQL the statements after a failed one are aborted unrun; the refusal is
    still the precise error, whichever statement of the batch it was in."""
    [holder] = enqueue(Envelope(kind="test.noop", unique_key="first"))
    plain = [Envelope(kind="test.noop", queue="chunks")] * 999
    with pytest.raises(DuplicateError) as info:
        enqueue([Envelope(kind="test.noop", unique_key="first"), *plain])
    assert info.value.existing_id == holder
    enqueue(dataclasses.replace(tasks.echo.envelope(value=1), id="taken"))
    with pytest.raises(IdConflictError):
        enqueue([*plain[:40], dataclasses.replace(tasks.echo.envelope(value=2), id="taken")])
    assert set(Job.objects.values_list("id", flat=True)) == {holder, "taken"}

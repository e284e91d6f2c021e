"""The admission fields of a job (``partition_key``, ``rate_class``, ``weight``): stored as
given by every enqueue path, refused with a clear error when they cannot be, and shown by
the API."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.db import transaction

from headgate_django import Envelope, enqueue, store, task
from headgate_django.exceptions import DefinitionError
from headgate_django.models import Job
from tests.conformance.helpers import envelope

pytestmark = pytest.mark.django_db

BAD = {
    "partition-129-bytes": {"partition_key": "p" * 129},
    "partition-multibyte-over": {"partition_key": "é" * 65},
    "partition-control": {"partition_key": "a\nb"},
    "partition-not-str": {"partition_key": 7},
    # Falsy, so never validated: None failed on the NOT NULL column (in a batch as
    # "conflicted with a concurrent write"), 0 and False were stored as "0", "" or "false".
    "partition-none": {"partition_key": None},
    "partition-zero": {"partition_key": 0},
    "partition-false": {"partition_key": False},
    "rate-class-empty": {"rate_class": ""},
    "rate-class-space": {"rate_class": "has space"},
    "rate-class-long": {"rate_class": "r" * 129},
    "weight-zero": {"weight": 0},
    "weight-negative": {"weight": -3},
    "weight-float": {"weight": 1.5},
    "weight-bool": {"weight": True},
}


@pytest.mark.parametrize("fields", BAD.values(), ids=BAD.keys())
def test_bad_admission_fields_are_refused_and_nothing_is_written(fields):
    before = Job.objects.count()
    with pytest.raises(DefinitionError) as info:
        enqueue([envelope(), envelope(**fields)])
    assert next(iter(fields)).replace("_", " ") in str(info.value)
    assert Job.objects.count() == before


@pytest.mark.parametrize("fields", BAD.values(), ids=BAD.keys())
def test_bad_admission_fields_at_task_decoration(fields):
    with pytest.raises(DefinitionError):

        @task(kind=f"test.bad-admission-{abs(hash(str(fields)))}", **fields)
        def handler(ctx):
            pass


@pytest.mark.parametrize("count", [1, 3], ids=["single", "batch"])
def test_fields_are_stored_as_given(count):
    envs = [
        envelope(partition_key=f"tenant-é{n}", rate_class="email", weight=n + 2)
        for n in range(count)
    ]
    ids = store.job_insert_many(envs)
    rows = Job.objects.in_bulk(ids)
    for job_id, env in zip(ids, envs, strict=True):
        job = rows[job_id]
        assert (job.partition_key, job.rate_class, job.weight) == (
            env.partition_key,
            "email",
            env.weight,
        )


def test_defaults_and_the_longest_partition_key():
    plain, longest = store.job_insert_many(
        [envelope(), envelope(partition_key="é" * 64)]  # 128 bytes
    )
    job = Job.objects.get(pk=plain)
    assert (job.partition_key, job.rate_class, job.weight) == ("", None, 1)
    assert Job.objects.get(pk=longest).partition_key == "é" * 64


def test_fields_in_a_transaction_and_delayed():
    with transaction.atomic():
        (inside,) = enqueue(envelope(partition_key="t1", rate_class="r1", weight=4))
    (later,) = enqueue(envelope(partition_key="t2", delay=timedelta(hours=1)))
    assert Job.objects.values_list("partition_key", "rate_class", "weight").get(pk=inside) == (
        "t1",
        "r1",
        4,
    )
    assert Job.objects.get(pk=later).partition_key == "t2"


@task(kind="test.admission-defaults", partition_key="acme", rate_class="reports", weight=5)
def with_defaults(ctx):
    pass


def test_task_defaults_and_call_overrides():
    job = Job.objects.get(pk=with_defaults.enqueue())
    assert (job.partition_key, job.rate_class, job.weight) == ("acme", "reports", 5)
    env = dataclasses.replace(with_defaults.envelope(), partition_key="globex", weight=2)
    other = Job.objects.get(pk=enqueue(env)[0])
    assert (other.partition_key, other.rate_class, other.weight) == ("globex", "reports", 2)


def test_envelope_defaults():
    env = Envelope(kind="test.noop")
    assert (env.partition_key, env.rate_class, env.weight) == ("", None, 1)

"""PostgreSQL's governed claim function (migration 0028) decides exactly what the portable
claim decides (``store.admitted``, ``store.fairness`` and the kernel, the reference).

Each case builds a governed queue at random (tenants, priorities, weights, rate classes,
kinds, running jobs, a ceiling, fairness with a rotation already under way, buckets in any
state), claims it once each way from the same rows, and compares what each admitted, in
which order, and every row it wrote: the leases, the rotation, the carried credit, the
buckets and the queue's ledger. Elsewhere there is no function and these tests skip.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection, connections, transaction

from headgate_django import admission, store
from headgate_django.kernel import admission as rates
from headgate_django.models import Fairness, Job, PartitionDeficit, QueueState, RateBucket
from headgate_django.store.admitted import (
    Claimer,
    _claim_one,
    claim_admitted,
    current_policy,
    forget_policy,
)
from headgate_django.store.claim import new_lease_id
from tests.conformance.helpers import LONG, WORKER, envelope, fresh_queue

pytestmark = pytest.mark.django_db

#: Far ahead of the store clock: a bucket refilled "then" gains nothing now, so the two
#: claims, a few milliseconds apart, see the same tokens (refill has its own test below).
_LATER_MS = 10**15
_CLASSES = ("gc-a", "gc-b")


@pytest.fixture(autouse=True)
def _postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the governed claim function is PostgreSQL's")


def outcome(queue: str, need: int, kinds: list[str] | None, *, on_server: bool) -> Any:
    """Claim ``queue`` once, on the server or on the portable path, and everything the
    claim decided; then undo it, so the other way starts from the same rows."""
    conn = connections["default"]
    policy = current_policy(conn, "default")
    if not on_server:  # a queue whose ceiling disposes of jobs is claimed portably
        policy = policy._replace(disposing=policy.disposing | {queue})
    claimer = Claimer(kinds, new_lease_id(WORKER), WORKER, 60_000, "default")
    with transaction.atomic():
        rows, _ = _claim_one(conn, queue, need, policy, claimer, weighted=True)
        decided = {
            "admitted": [row[0] for row in rows],
            "running": sorted(
                Job.objects.filter(queue=queue, state="running").values_list("id", "fence")
            ),
            "rotation": list(Fairness.objects.filter(queue=queue).values_list("turn", "credit")),
            "carried": sorted(
                PartitionDeficit.objects.filter(queue=queue).values_list("partition_key", "deficit")
            ),
            "tokens": sorted(RateBucket.objects.values_list("name", "tokens")),
            "ledger": QueueState.objects.get(name=queue).dispatched,
        }
        transaction.set_rollback(True)
    return decided


@dataclass(frozen=True)
class Shape:
    """How large a random case is."""

    tenants: int
    jobs: int  # per tenant, at most
    need: int
    quantum: int
    weights: tuple[int, ...]
    ceiling: int
    burst: int
    full_buckets: int  # more chances that a bucket starts full


#: Small cases, where every rule decides often.
SMALL = Shape(
    tenants=5,
    jobs=12,
    need=25,
    quantum=5,
    weights=(1, 1, 2, 3, 7),
    ceiling=4,
    burst=6,
    full_buckets=0,
)
#: Claims that visit many partitions, some several times, and read partitions ahead
#: (migration 0030): mostly jobs of weight 1, buckets that run dry part-way.
LARGE = Shape(
    tenants=12,
    jobs=40,
    need=150,
    quantum=8,
    weights=(1, 1, 1, 1, 2),
    ceiling=30,
    burst=90,
    full_buckets=3,
)
_TENANTS = ["", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]


def build(rng: random.Random, shape: Shape = SMALL) -> tuple[str, int, list[str] | None]:
    """A governed queue in a random state; the claim's ``need`` and ``kinds``."""
    q = fresh_queue()
    tenants = rng.sample(_TENANTS[: shape.tenants + 1], rng.randint(1, shape.tenants))
    # Jobs already running, claimed before any policy exists (they take ceiling slots).
    running = [
        envelope(queue=q, partition_key=t) for t in tenants for _ in range(rng.randint(0, 3))
    ]
    if running:
        store.job_insert_many(running)
        store.job_claim(worker_id=WORKER, limit=len(running), lease_ttl=LONG, queues=[q])
    waiting = [
        envelope(
            queue=q,
            partition_key=t,
            priority=rng.choice([0, 0, 1, 5]),
            weight=rng.choice(shape.weights),
            rate_class=rng.choice([None, None, *_CLASSES, "gc-unconfigured"]),
            kind=rng.choice(["test.noop", "test.noop", "test.other"]),
        )
        for t in tenants
        for _ in range(rng.randint(0, shape.jobs))
    ]
    if waiting:
        store.job_insert_many(waiting)
    if rng.random() < 0.7:
        admission.set_concurrency_limit(q, rng.randint(1, shape.ceiling))
    if rng.random() < 0.7:
        admission.set_fairness(
            q, quantum=rng.randint(1, shape.quantum), credit_cap=rng.randint(0, 6)
        )
        Fairness.objects.filter(queue=q).update(
            turn=rng.choice([None, "zz", *tenants]), credit=rng.randint(0, 4)
        )
        for t in rng.sample(tenants, rng.randint(0, len(tenants))):
            PartitionDeficit.objects.create(queue=q, partition_key=t, deficit=rng.randint(1, 8))
    admission.set_queue_weight(q, rng.randint(1, 3))  # governed even with no other policy
    for name in _CLASSES:
        if rng.random() < 0.6:
            burst = rng.randint(1, shape.burst)
            admission.set_rate_class(
                name, limit=burst, window=60, burst=burst, paused=rng.random() < 0.15
            )
            RateBucket.objects.filter(name=name).update(
                tokens=rng.choice(
                    [-1.5, 0.0, 0.5, 1.0, 2.25] + [float(burst)] * (1 + shape.full_buckets)
                ),
                refilled_at_ms=_LATER_MS,
            )
    return q, rng.randint(1, shape.need), rng.choice([None, None, ["test.noop"]])


@pytest.mark.parametrize("seed", range(400))
def test_the_function_claims_what_the_portable_claim_claims(seed):
    q, need, kinds = build(random.Random(seed))
    portable = outcome(q, need, kinds, on_server=False)
    assert outcome(q, need, kinds, on_server=True) == portable


@pytest.mark.parametrize("seed", range(120))
def test_large_claims_read_ahead_to_the_same_decisions(seed):
    """Claims of up to 150 over up to 12 tenants: the function reads many partitions'
    jobs ahead in one statement and takes each visit's from them, which must decide what
    reading each visit afresh decides (the portable claim's reads), also when a class
    closes part-way through and what was read ahead falls short."""
    q, need, kinds = build(random.Random(seed), LARGE)
    portable = outcome(q, need, kinds, on_server=False)
    assert outcome(q, need, kinds, on_server=True) == portable


def test_the_cases_reach_every_decision():
    """The random cases above are worth comparing: among them some claims admit jobs,
    some are held back by a ceiling, by a rate class, and by the rotation's credit."""
    seen = set()
    for seed in range(400):
        with transaction.atomic():
            q, need, kinds = build(random.Random(seed))
            got = outcome(q, need, kinds, on_server=True)
            waiting = Job.objects.filter(queue=q, state="available").count()
            if got["admitted"]:
                seen.add("admitted")
            if len(got["admitted"]) < min(need, waiting):
                seen.add("held back")
            if got["carried"]:
                seen.add("carried credit")
            transaction.set_rollback(True)
    assert seen == {"admitted", "held back", "carried credit"}


def test_a_disposing_ceiling_the_process_has_not_seen_yet_is_claimed_portably():
    """A process whose view of the policies is older than a ``discard`` ceiling still
    calls the function: it answers that the queue is not its to claim, and the claim
    archives the job its full partition cannot take, as the portable path does."""
    q = fresh_queue()
    first, second = store.job_insert_many([envelope(queue=q), envelope(queue=q)])
    conn = connections["default"]
    admission.set_concurrency_limit(q, 1, on_saturated="discard")
    stale = current_policy(conn, "default")._replace(disposing=frozenset())
    claimer = Claimer(None, new_lease_id(WORKER), WORKER, 60_000, "default")
    rows, _ = _claim_one(conn, q, 2, stale, claimer, weighted=False)
    assert len(rows) == 1
    states = dict(Job.objects.filter(queue=q).values_list("id", "state"))
    assert sorted(states.values()) == ["archived", "running"]
    assert {first, second} == set(states)


def test_dry_queues_are_leveled_as_the_portable_claim_levels_them_in_one_statement():
    """While one weighted queue is dry, the claim that the other fills also raises the
    dry one's ledger (``store.weights``' levels), to what the portable path writes after
    the claim, and sends no update of its own for it."""
    a, b = fresh_queue(), fresh_queue()
    store.job_insert_many([envelope(queue=a) for _ in range(2)])
    store.job_insert_many([envelope(queue=b) for _ in range(40)])
    admission.set_queue_weight(a, 3)
    admission.set_queue_weight(b, 1)
    conn = connections["default"]
    ledgers: list[dict[str, int]] = []
    sent: list[tuple[bool, str]] = []
    for on_server in (False, True):

        def record(execute, sql, *rest, on_server=on_server):
            sent.append((on_server, sql))
            return execute(sql, *rest)

        with transaction.atomic(), conn.execute_wrapper(record):
            forget_policy()
            policy = current_policy(conn, "default")
            if not on_server:
                policy = policy._replace(disposing=frozenset({a, b}))
            for _ in range(4):
                claimer = Claimer(None, new_lease_id(WORKER), WORKER, 60_000, "default")
                claim_admitted(conn, policy, queues=[a, b], limit=5, claimer=claimer)
            ledgers.append(
                dict(QueueState.objects.filter(name__in=[a, b]).values_list("name", "dispatched"))
            )
            transaction.set_rollback(True)
    assert ledgers[0] == ledgers[1]
    assert ledgers[1][a] > 2  # raised past what it served
    level = "UPDATE headgate_queue_state SET dispatched = %s"
    assert any(level in sql for server, sql in sent if not server)
    assert not any(level in sql for server, sql in sent if server)


@pytest.mark.parametrize(
    ("tokens", "burst", "limit", "window_ms", "elapsed_ms"),
    [
        (0.0, 10, 10, 1000, 0),
        (0.0, 10, 10, 1000, -5),
        (3.5, 10, 10, 1000, 250),
        (-4.0, 10, 10, 1000, 100),
        (9.9, 10, 10, 1000, 10_000),
        (0.0, 1_000_000, 1_000_000, 1000, 1),
        (0.25, 7, 3, 86_400_000, 12_345),
        (1.0, 2**31 - 1, 2**31 - 1, 1, 3_000),
        (0.0, 50, 20, 1000, 37),
    ],
)
def test_refill_is_the_kernels(tokens, burst, limit, window_ms, elapsed_ms):
    """The function refills a bucket with ``headgate_refill``, the kernel's rule again."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT headgate_refill(%s, %s, %s, %s, %s), headgate_spend_needed(%s, %s)",
            [tokens, burst, limit, window_ms, elapsed_ms, 3, burst],
        )
        refilled, needed = cursor.fetchone()
    assert refilled == rates.refill(tokens, burst, limit, window_ms, elapsed_ms)
    assert needed == rates.spend_needed(3, burst)


@pytest.mark.parametrize("turn", [None, "t040", "t069"])
def test_a_rotation_longer_than_one_discovery_is_walked_as_the_portable_claim_walks_it(turn):
    """Past 64 partitions one walk from the start does not find the whole rotation, so the
    function walks again from the turn, and what it learns of each partition's successor
    must still be the rotation's (here the claim goes round the 70 tenants more than twice,
    with a ceiling that fills some of them and a credit carried by others)."""
    q = fresh_queue()
    store.job_insert_many(
        [envelope(queue=q, partition_key=f"t{i:03d}") for i in range(70) for _ in range(3)]
    )
    admission.set_concurrency_limit(q, 2)
    admission.set_fairness(q, quantum=1, credit_cap=2)
    Fairness.objects.filter(queue=q).update(turn=turn, credit=1 if turn else 0)
    for i in range(0, 70, 9):
        PartitionDeficit.objects.create(queue=q, partition_key=f"t{i:03d}", deficit=2)
    portable = outcome(q, 150, None, on_server=False)
    assert len(portable["admitted"]) == 140
    assert outcome(q, 150, None, on_server=True) == portable

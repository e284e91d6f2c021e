"""The pure arithmetic of sharing (``kernel/fairness.py``): deficit round-robin between
tenants against an in-memory backlog, and weighted-fair selection between queues."""

from __future__ import annotations

import pytest

from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.fairness import (
    Ledger,
    Verdict,
    Walk,
    idle_floor,
    rescale,
    validate_fairness,
    validate_weight,
    weighted_order,
)


class Backlog:
    """Waiting jobs per partition as ``(name, weight)``, in claim order, as a store holds
    them: a claim reads each job at most once, and only an admitted job leaves."""

    def __init__(self, jobs: dict[str, list[tuple[str, int]]], full: set[str] = frozenset()):
        self.jobs = {p: list(js) for p, js in jobs.items() if js}
        self.full = set(full)
        self.reads: list[tuple[str, int]] = []
        self.returned: set[str] = set()

    def next_partition(self, key, inclusive):
        keys = sorted(p for p, js in self.jobs.items() if js)
        if not keys:
            return None
        after = [k for k in keys if key is None or k > key or (inclusive and k == key)]
        return after[0] if after else keys[0]

    def candidates(self, partition, n):
        self.reads.append((partition, n))
        fresh = [(name, w) for name, w in self.jobs[partition] if name not in self.returned]
        self.returned.update(name for name, _ in fresh[:n])
        return fresh[:n]

    def decide(self, job, partition):
        if partition in self.full:
            return Verdict.FULL
        self.jobs[partition] = [j for j in self.jobs[partition] if j[0] != job]
        return Verdict.ADMITTED


def claims(backlog: Backlog, ledger: Ledger, need: int, quantum=10, cap=40) -> list[str]:
    walk = Walk(ledger, quantum, cap)
    admitted: list[str] = []
    decide = backlog.decide

    def record(job, partition):
        verdict = decide(job, partition)
        if verdict is Verdict.ADMITTED:
            admitted.append(job)
        return verdict

    backlog.decide = record  # type: ignore[method-assign]
    backlog.returned = set()
    try:
        assert walk.run(backlog, need) == len(admitted)
    finally:
        backlog.decide = decide  # type: ignore[method-assign]
    return admitted


def jobs(tenant: str, n: int, weight: int = 1) -> list[tuple[str, int]]:
    return [(f"{tenant}{i}", weight) for i in range(n)]


def test_a_newcomer_waits_one_turn_whatever_the_backlog():
    backlog = Backlog({"a": jobs("a", 100_000)})
    ledger = Ledger()
    started: list[str] = []
    started += claims(backlog, ledger, 4)
    backlog.jobs["b"] = jobs("b", 1)
    while "b0" not in started:
        started += claims(backlog, ledger, 4)
    assert started.index("b0") <= 10 + 40


def test_turns_alternate_by_quantum_and_a_full_claim_keeps_its_place():
    backlog = Backlog({"a": jobs("a", 50), "b": jobs("b", 50)})
    ledger = Ledger()
    assert claims(backlog, ledger, 15) == jobs_names("a", 0, 10) + jobs_names("b", 0, 5)
    assert (ledger.turn, ledger.credit) == ("b", 5)
    assert claims(backlog, ledger, 10) == jobs_names("b", 5, 10) + jobs_names("a", 10, 15)


def jobs_names(tenant: str, start: int, stop: int) -> list[str]:
    return [f"{tenant}{i}" for i in range(start, stop)]


def test_work_conserving_a_lone_tenant_takes_the_whole_claim():
    backlog = Backlog({"a": jobs("a", 500)})
    assert len(claims(backlog, Ledger(), 100)) == 100


def test_weights_cost_credit_and_leftover_is_carried_capped():
    backlog = Backlog({"a": jobs("a", 10, weight=4), "b": jobs("b", 100)})
    ledger = Ledger()
    first = claims(backlog, ledger, 12, quantum=10, cap=40)
    assert first[:2] == ["a0", "a1"]  # 8 of 10 spent, 2 carried
    assert ledger.deficits == {"a": 2}
    claims(backlog, ledger, 10, quantum=10, cap=40)  # a's next share: 2 + 10 = 12: 3 jobs
    assert backlog.jobs["a"][0][0] == "a5"


def test_a_job_heavier_than_a_share_is_admitted_once_its_tenant_saved_up():
    backlog = Backlog({"a": jobs("a", 1, weight=1000), "b": jobs("b", 1000)})
    ledger = Ledger()
    rounds = 0
    while backlog.jobs.get("a"):
        claims(backlog, ledger, 20, quantum=10, cap=40)
        rounds += 1
    assert rounds <= 6


def test_a_full_partition_carries_its_credit_and_the_round_stops():
    backlog = Backlog({"a": jobs("a", 5), "b": jobs("b", 5)}, full={"a", "b"})
    ledger = Ledger()
    assert claims(backlog, ledger, 10, quantum=10, cap=4) == []
    assert ledger.deficits == {"a": 4, "b": 4}


def test_a_partition_that_fills_up_keeps_its_credit_for_the_rest_of_the_claim():
    backlog = Backlog({"a": jobs("a", 5), "b": jobs("b", 1)})
    admitted = {"a": 0}
    decide = backlog.decide

    def one_slot_for_a(job, partition):
        if partition == "a" and admitted["a"] >= 1:
            return Verdict.FULL
        admitted["a"] += partition == "a"
        return decide(job, partition)

    backlog.decide = one_slot_for_a  # type: ignore[method-assign]
    ledger = Ledger()
    assert claims(backlog, ledger, 5, quantum=1, cap=5) == ["a0", "b0"]
    assert ledger.deficits == {"a": 1}


def test_an_idle_partition_banks_nothing():
    backlog = Backlog({"a": jobs("a", 2), "b": jobs("b", 30)})
    ledger = Ledger(deficits={"a": 7})
    assert claims(backlog, ledger, 30) == ["a0", "a1", *jobs_names("b", 0, 28)]
    assert "a" not in ledger.deficits


def test_reads_ask_for_no_more_than_a_share():
    backlog = Backlog({"a": jobs("a", 100), "b": jobs("b", 100)})
    claims(backlog, Ledger(), 25, quantum=10, cap=40)
    assert all(n <= 10 for _, n in backlog.reads)


@pytest.mark.parametrize(
    "quantum,cap", [(0, 0), (-1, 4), (True, 4), (1.0, 4), (10, -1), (10, None), (10**6, 0)]
)
def test_bad_fairness_values(quantum, cap):
    with pytest.raises(DefinitionError):
        validate_fairness(quantum, cap)


def test_good_fairness_values():
    assert validate_fairness(1, 0) == (1, 0)


# -- weights ---------------------------------------------------------------------------


def test_weighted_order_is_the_virtual_positions():
    assert weighted_order({"a": (0, 3), "b": (0, 1)}) == ["a", "b"]  # ties by name
    assert weighted_order({"a": (4, 3), "b": (1, 1)}) == ["b", "a"]
    assert weighted_order({"a": (6, 3), "b": (3, 1)}) == ["a", "b"]
    assert weighted_order({}) == []


@pytest.mark.parametrize("size", [1, 4, 10, 100])
def test_whole_claims_from_the_lowest_queue_split_by_weight(size):
    ledger = {"a": [0, 3], "b": [0, 1]}
    counts = {"a": 0, "b": 0}
    while sum(counts.values()) < 400:
        q = weighted_order({k: (d, w) for k, (d, w) in ledger.items()})[0]
        counts[q] += size
        ledger[q][0] += size
    assert counts == {"a": 300, "b": 100}


def test_an_idle_queue_comes_back_level_not_owed():
    ledger = {"a": (900, 3), "b": (10, 1)}
    floor = idle_floor(ledger, busy=["a"])
    assert floor("b") == 300 and floor("a") == 900


def test_a_weight_change_keeps_the_virtual_position():
    assert rescale(300, 3, 1) == 100
    assert rescale(100, 1, 3) == 300


@pytest.mark.parametrize("weight", [0, -1, True, 1.5, "3", None, 2**31])
def test_bad_weights(weight):
    with pytest.raises(DefinitionError):
        validate_weight(weight)

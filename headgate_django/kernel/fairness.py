"""The pure arithmetic of sharing: deficit round-robin between the tenants of a queue, and
weighted-fair selection between queues.

**Tenants.** The partitions (``partition_key``) with waiting jobs take turns in key order,
wrapping around. A partition's visit may admit jobs costing up to its *share*: its carried
credit (at most ``credit_cap``) plus ``quantum``; a job costs its ``weight``, at least 1 and
at most one full share. A visit ends when the next job costs more than what is left (the
rest is carried, capped), when the partition can admit nothing more now (a full ceiling, a
closed rate class: carried too), or when it has no more waiting jobs (an idle partition
banks nothing, so its share goes to the others: work-conserving). A claim that fills up in
the middle of a visit leaves the turn there, and the next claim resumes it. So a newly busy
tenant waits for at most one visit of each other busy tenant, however deep their backlogs:
at most ``(partitions - 1) × (quantum + credit_cap)`` admissions.

**Queues.** Queue ``q`` stands at the virtual position ``dispatched_q / weight_q``, where
``dispatched_q`` counts the jobs claims took from it (a ledger the store persists); the
``r``-th job after that would sit at ``(dispatched_q + r - 1) / weight_q``. Serving the
lowest position first, ties by queue name, two queues busy over a stretch are served in
the ratio of their weights.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from headgate_django.exceptions import DefinitionError
from headgate_django.kernel.admission import MAX_POLICY_INT, positive_int

DEFAULT_QUANTUM = 10
DEFAULT_CREDIT_CAP = 40
#: The largest quantum or credit cap: one visit's share must fit the claim's arithmetic
#: and a partition's wait stay meaningful.
MAX_QUANTUM = 100_000


def validate_fairness(quantum: Any, credit_cap: Any) -> tuple[int, int]:
    """``(quantum, credit_cap)`` as a queue stores them: a quantum from 1 and a cap from 0,
    both at most :data:`MAX_QUANTUM`."""
    positive_int(quantum, "quantum")
    if quantum > MAX_QUANTUM:
        raise DefinitionError(f"quantum must be at most {MAX_QUANTUM}, got {quantum!r}")
    if type(credit_cap) is not int or not 0 <= credit_cap <= MAX_QUANTUM:
        raise DefinitionError(
            f"credit_cap must be an integer from 0 to {MAX_QUANTUM}, got {credit_cap!r}"
        )
    return quantum, credit_cap


def validate_weight(weight: Any) -> int:
    """A queue's weight: a whole number from 1."""
    if type(weight) is not int or not 1 <= weight <= MAX_POLICY_INT:
        raise DefinitionError(
            f"a queue weight must be an integer from 1 to {MAX_POLICY_INT}, got {weight!r}"
        )
    return weight


class Verdict(enum.Enum):
    """What the other admission rules said of one candidate."""

    ADMITTED = "admitted"
    PASSED = "passed"  # not this one; the partition may still admit others
    FULL = "full"  # the partition can admit nothing more now


class Source(Protocol):
    """What a walk reads and asks while it runs (the store implements it)."""

    def next_partition(self, key: str | None, inclusive: bool) -> str | None:
        """The first partition with waiting jobs after ``key`` (or at it, if ``inclusive``)
        in key order, wrapping around to the smallest; ``None`` when none waits. ``None``
        as ``key`` means from the start."""
        ...

    def candidates(self, partition: str, n: int) -> list[tuple[Any, int]]:
        """The partition's next ``n`` waiting jobs as ``(job, weight)``, in claim order,
        none returned before in this claim; fewer when there are no more."""
        ...

    def decide(self, job: Any, partition: str) -> Verdict:
        """Apply the other rules (rate class, ceiling) to a candidate."""
        ...


@dataclass
class Ledger:
    """A queue's round-robin state: the partition in the middle of its visit (``turn``),
    the credit that visit has left (0: the visit is over), and the credit other
    partitions carry."""

    turn: str | None = None
    credit: int = 0
    deficits: dict[str, int] = field(default_factory=dict)


@dataclass
class Walk:
    """One claim's deficit round-robin over a queue's partitions."""

    ledger: Ledger
    quantum: int
    credit_cap: int
    #: Partitions whose carried credit this walk changed (to write back).
    touched: set[str] = field(default_factory=set)
    _held: dict[str, list[tuple[Any, int]]] = field(default_factory=dict)
    _full: set[str] = field(default_factory=set)

    def cost(self, weight: int) -> int:
        """What a job spends of its partition's share: its weight, from 1 to one full
        share (so even the heaviest job is admitted once its partition saves up)."""
        return max(1, min(weight, self.quantum + self.credit_cap))

    def share(self, partition: str) -> int:
        """A new visit's credit: the carried credit, capped, plus the quantum."""
        return min(self.ledger.deficits.get(partition, 0), self.credit_cap) + self.quantum

    def run(self, source: Source, need: int) -> int:
        """Admit up to ``need`` jobs (through ``source.decide``); how many."""
        ledger = self.ledger
        resume = ledger.turn is not None and ledger.credit > 0
        p = source.next_partition(ledger.turn, inclusive=resume)
        credit = ledger.credit if resume and p == ledger.turn else None
        admitted, fruitless_since = 0, None
        while p is not None and admitted < need and p != fruitless_since:
            if p in self._full:  # it admits nothing more in this claim
                got, ended = 0, True
            else:
                if credit is None:
                    credit = self.share(p)
                got, credit, ended = self._visit(source, p, credit, need - admitted)
                admitted += got
                ledger.turn, ledger.credit = p, (0 if ended else credit)
            if not ended:
                break
            if got:
                fruitless_since = None
            elif fruitless_since is None:
                fruitless_since = p  # a whole round from here admitting nothing ends it
            p, credit = source.next_partition(p, inclusive=False), None
        return admitted

    def _visit(self, source: Source, p: str, credit: int, want: int) -> tuple[int, int, bool]:
        """Serve partition ``p`` with ``credit``: ``(admitted, credit left, ended)``. An
        unended visit stopped only because the claim is full."""
        got, passed = 0, False
        held = self._held.setdefault(p, [])
        while got < want and credit > 0:
            if not held:
                held += source.candidates(p, min(credit, want - got))
                if not held:  # nothing more waits here that this claim may take
                    self._carry(p, credit if passed else 0)
                    return got, credit, True
            job, weight = held[0]
            cost = self.cost(weight)
            if cost > credit:
                self._carry(p, credit)
                return got, credit, True
            held.pop(0)
            verdict = source.decide(job, p)
            if verdict is Verdict.ADMITTED:
                credit -= cost
                got += 1
            elif verdict is Verdict.FULL:
                self._full.add(p)
                self._carry(p, credit)
                return got, credit, True
            else:
                passed = True
        if credit <= 0:
            self._carry(p, 0)
            return got, 0, True
        return got, credit, False

    def _carry(self, partition: str, credit: int) -> None:
        carried = min(max(credit, 0), self.credit_cap)
        if self.ledger.deficits.get(partition, 0) != carried:
            self.touched.add(partition)
        if carried:
            self.ledger.deficits[partition] = carried
        else:
            self.ledger.deficits.pop(partition, None)


# -- queues: weighted-fair selection over a persisted ledger --------------------------------


def weighted_order(ledger: Mapping[str, tuple[int, int]]) -> list[str]:
    """The queues of ``ledger`` (queue → ``(dispatched, weight)``) lowest virtual position
    first, ties by name: the order a claim tries them in."""
    return sorted(ledger, key=lambda q: (Fraction(ledger[q][0], ledger[q][1]), q))


def idle_floor(ledger: Mapping[str, tuple[int, int]], busy: Iterable[str]) -> Callable[[str], int]:
    """The least a queue's ``dispatched`` may be once it ran out of work: the virtual time
    of the busiest-served queue still busy, scaled to its weight. A queue idle for a while
    therefore comes back level with the others instead of owed a burst of claims."""
    positions = [Fraction(ledger[q][0], ledger[q][1]) for q in busy if q in ledger]
    now = min(positions) if positions else None

    def floor(queue: str) -> int:
        d, w = ledger[queue]
        return d if now is None else max(d, int(now * w))

    return floor


def rescale(dispatched: int, old_weight: int, new_weight: int) -> int:
    """A queue's ledger after its weight changes, at the same virtual position."""
    return dispatched * new_weight // old_weight

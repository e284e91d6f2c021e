"""The claim of a fair queue: deficit round-robin over its partitions, in the claim's own
transaction (``store.admitted`` holds the queue's ``headgate_queue_state`` lock, which
every claim of the queue and every change of its policy takes, so one claim at a time
moves the rotation and it holds across any number of worker processes).

The walk itself is :class:`headgate_django.kernel.fairness.Walk`; this module is what it
reads and writes:

- the partitions with waiting jobs, in key order after a key: a loose scan of
  ``headgate_job_fair`` (one index probe per partition, in one recursive statement for the
  next few), however deep each partition's backlog is;
- each partition's next jobs in claim order, for a few partitions per statement;
- the queue's ``headgate_fairness`` row (``turn``, ``credit``) and the credit partitions
  carry (``headgate_partition_deficit``), written back only when they changed.

The other rules (rate classes, the ceiling) decide each candidate as in any governed
claim (``store.admitted._Admission``); fairness comes after them, as in Headgate. On
PostgreSQL a fair queue's claim runs on the server (``store.governed_claim``), walking
the same rotation step for step; this module is the reference for what it reads, and the
console's and ``explain``'s reads of the rotation stay here on every database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.kernel.fairness import Ledger, Verdict, Walk
from headgate_django.kernel.states import State
from headgate_django.store import vendor as v
from headgate_django.store.prepared import server_bound_cursor

#: Partitions one discovery statement finds at most, and partitions one candidate
#: statement reads ahead (besides the one asked for).
_DISCOVER = 64
_READ_AHEAD = 16
_ORDER = "priority DESC, scheduled_at, id"


def waiting_in_queue(conn: BaseDatabaseWrapper) -> tuple[str, str]:
    """``(from, where)``: the waiting jobs of one queue (a ``%s``) through the fair index.
    On MySQL/MariaDB the generated column is the queue exactly while the job waits."""
    if conn.vendor == "mysql":
        return "headgate_job FORCE INDEX (headgate_job_fair_my)", "fair_queue = %s"
    return "headgate_job", f"state = '{State.AVAILABLE.value}' AND queue = %s"


#: How far :func:`waiting_jobs` counts.
COUNT_UP_TO = 10_000


def waiting_jobs(
    cursor: Any, conn: BaseDatabaseWrapper, queue: str, partition: str | None = None
) -> int:
    """The queue's (or one partition's) available jobs, counted up to one past
    :data:`COUNT_UP_TO` (the console shows more as "more than")."""
    table, where = waiting_in_queue(conn)
    params: list[Any] = [queue]
    if partition is not None:
        where += " AND partition_key = %s"
        params.append(partition)
    cursor.execute(
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT %s) waiting",
        [*params, COUNT_UP_TO + 1],
    )
    return int(cursor.fetchone()[0])


def partitions_waiting(
    cursor: Any, conn: BaseDatabaseWrapper, queue: str, limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` partitions of a fair queue in its rotation's order from the
    turn, with their waiting jobs and carried credit (the console's view)."""
    cursor.execute("SELECT turn, credit, quantum FROM headgate_fairness WHERE queue = %s", [queue])
    found = cursor.fetchone()
    if found is None:
        return []
    turn, credit, quantum = found
    source = FairSource(cursor, conn, queue, None, None, quantum)
    keys: list[str] = []
    key = source.next_partition(turn, inclusive=turn is not None and credit > 0)
    while key is not None and key not in keys and len(keys) < limit:
        keys.append(key)
        key = source.next_partition(key, inclusive=False)
    cursor.execute(
        "SELECT partition_key, deficit FROM headgate_partition_deficit WHERE queue = %s",
        [queue],
    )
    carried = dict(cursor.fetchall())
    return [
        {
            "partition_key": k,
            "waiting": waiting_jobs(cursor, conn, queue, k),
            "deficit": carried.get(k, 0),
            "has_turn": k == turn and credit > 0,
        }
        for k in keys
    ]


class FairSource:
    """The store's side of one claim's walk (:class:`~headgate_django.kernel.fairness.Source`)."""

    def __init__(
        self,
        cursor: Any,
        conn: BaseDatabaseWrapper,
        queue: str,
        admission: Any,
        kinds: Sequence[str] | None,
        quantum: int,
    ) -> None:
        self.cursor, self.conn, self.queue = cursor, conn, queue
        self.admission = admission
        self.kinds = kinds
        self.quantum = quantum
        self.table, self.waiting = waiting_in_queue(conn)
        self._next: dict[tuple[str | None, bool], str | None] = {}
        self._buffer: dict[str, list[tuple[Any, int]]] = {}
        self._seen: dict[str, list[str]] = {}
        self._exhausted: set[str] = set()

    # -- partitions -------------------------------------------------------------------

    def next_partition(self, key: str | None, inclusive: bool) -> str | None:
        step = (key, inclusive or key is None)
        if step not in self._next:
            self._learn(*step)
        return self._next[step]

    def _learn(self, key: str | None, inclusive: bool) -> None:
        """Find the next partitions after ``key``, wrapping around, and remember each
        one's successor (the whole rotation's, when it is short enough to read at once)."""
        forward, wrapped = self._discover("" if key is None else key, inclusive)
        known = set(forward)
        order = (
            forward + [k for k in wrapped if k not in known]
            if len(forward) < _DISCOVER
            else forward
        )
        steps = [(key, inclusive)] + [(k, False) for k in order]
        for step, successor in zip(steps, order, strict=False):
            self._next[step] = successor
        if not order:
            self._next[(key, inclusive)] = None
        elif len(forward) < _DISCOVER and len(wrapped) < _DISCOVER:
            # The largest key's successor is the smallest: the first of ``order``.
            self._next[(order[-1], False)] = order[0]

    def _discover(self, key: str, inclusive: bool) -> tuple[list[str], list[str]]:
        """The partitions after ``key`` and those from the start, in key order, up to
        :data:`_DISCOVER` of each: one index probe per partition, in one statement."""
        probe = (
            f"SELECT partition_key FROM {self.table} WHERE {self.waiting} "
            "AND partition_key {op} {key} ORDER BY partition_key LIMIT 1"
        )

        def walk(name: str, op: str) -> str:
            return (
                f"{name} (k, n) AS (SELECT ({probe.format(op=op, key='%s')}), 1 "
                f"UNION ALL SELECT ({probe.format(op='>', key=name + '.k')}), n + 1 "
                f"FROM {name} WHERE {name}.k IS NOT NULL AND n < %s)"
            )

        with server_bound_cursor(self.conn) as cursor:  # its text never changes
            cursor.execute(
                f"WITH RECURSIVE {walk('f', '>=' if inclusive else '>')}, {walk('w', '>=')} "
                "SELECT 0, n, k FROM f WHERE k IS NOT NULL "
                "UNION ALL SELECT 1, n, k FROM w WHERE k IS NOT NULL",
                [self.queue, key, self.queue, _DISCOVER, self.queue, "", self.queue, _DISCOVER],
            )
            found = cursor.fetchall()
        # Ordered by the walk's steps, not by comparing keys here: the database's
        # collation decides key order.
        rows = sorted(found, key=lambda r: (r[0], r[1]))
        return [k for g, _, k in rows if g == 0], [k for g, _, k in rows if g == 1]

    # -- candidates -------------------------------------------------------------------

    def candidates(self, partition: str, n: int) -> list[tuple[Any, int]]:
        """The partition's next ``n`` jobs not handed out before, of classes still open
        now: a job read ahead whose class closed since is dropped here as a fresh read
        would leave it out (a class does not reopen within a claim), so what a visit sees
        does not depend on when its jobs were read (PostgreSQL's function reads afresh)."""
        buffer = self._buffer.setdefault(partition, [])
        buckets = self.admission.buckets
        if buffer and buckets is not None and (closed := buckets.closed()):
            buffer[:] = [c for c in buffer if c[0][1] not in closed]
        if len(buffer) < n and partition not in self._exhausted:
            if self._next.get((partition, False)) == partition:
                # Alone in the rotation: its visits follow one another, so read for all
                # of them at once (work-conserving, one statement).
                n = max(n, self.admission.need - len(self.admission.admitted))
            self._read([(partition, n - len(buffer)), *self._ahead(partition, n)])
        taken, self._buffer[partition] = buffer[:n], buffer[n:]
        return taken

    def _ahead(self, partition: str, n: int) -> list[tuple[str, int]]:
        """The partitions after ``partition`` that the walk will likely visit in this
        claim (a quantum each, as many as the claim still needs after ``n``), if their
        jobs have not been read yet."""
        out: list[tuple[str, int]] = []
        key = partition
        rest = self.admission.need - len(self.admission.admitted) - n
        for _ in range(min(_READ_AHEAD, -(-rest // self.quantum))):
            step = (key, False)
            key_next = self._next.get(step)
            if key_next is None or key_next == partition:
                break
            if key_next not in self._buffer and key_next not in self._exhausted:
                out.append((key_next, self.quantum))
            key = key_next
        return out

    def _read(self, wanted: list[tuple[str, int]]) -> None:
        closed = self.admission.buckets.closed() if self.admission.buckets is not None else []
        if self.conn.vendor == "postgresql":
            rows = self._read_lateral(wanted, closed)
        else:
            rows = self._read_union(wanted, closed)
        rows.sort(key=lambda r: (r[0], -r[4], r[5], r[1]))
        got = [0] * len(wanted)
        for i, job_id, cls, weight, _, _ in rows:
            partition = wanted[i][0]
            got[i] += 1
            self._seen.setdefault(partition, []).append(job_id)
            self._buffer.setdefault(partition, []).append(((job_id, cls, weight), weight))
        for (partition, n), count in zip(wanted, got, strict=True):
            self._buffer.setdefault(partition, [])
            if count < n:
                self._exhausted.add(partition)

    def _read_lateral(self, wanted: list[tuple[str, int]], closed: list[str]) -> list[Any]:
        """PostgreSQL: every partition's next jobs in one statement whose text never
        changes (lists as split text parameters), so it is bound and planned once."""
        seen = [job_id for ids in self._seen.values() for job_id in ids]
        names = v.pg_list("varchar")
        # Not ``pg_list`` for the partitions: ``string_to_array`` reads "" as no items,
        # and "" (no tenant) alone is a list of one partition here, never an empty list.
        partitions = "regexp_split_to_array(%s::text, chr(31))::varchar[]"
        sql = (
            "SELECT w.i - 1, j.id, j.rate_class, j.weight, j.priority, j.scheduled_at "
            f"FROM unnest({partitions}, string_to_array(%s::text, ',')::integer[]) "
            "WITH ORDINALITY AS w (p, n, i) CROSS JOIN LATERAL ("
            "SELECT id, rate_class, weight, priority, scheduled_at FROM headgate_job "
            f"WHERE state = '{State.AVAILABLE.value}' AND queue = %s AND partition_key = w.p "
            f"AND (%s::text IS NULL OR kind = ANY({names})) "
            f"AND NOT (id = ANY({names})) "
            f"AND (rate_class IS NULL OR NOT (rate_class = ANY({names}))) "
            f"ORDER BY {_ORDER} LIMIT w.n) j"
        )
        kinds = None if self.kinds is None else v.pg_list_param(self.kinds)
        params = [
            v.pg_list_param(p for p, _ in wanted),
            ",".join(str(n) for _, n in wanted),
            self.queue,
            kinds,
            kinds or "",
            v.pg_list_param(seen),
            v.pg_list_param(closed),
        ]
        with server_bound_cursor(self.conn) as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _read_union(self, wanted: list[tuple[str, int]], closed: list[str]) -> list[Any]:
        """Elsewhere: one ordered, limited read per partition, joined by UNION ALL."""
        parts, params = [], []
        for i, (partition, n) in enumerate(wanted):
            where = [self.waiting, "partition_key = %s"]
            values: list[Any] = [self.queue, partition]
            if self.kinds is not None:
                where.append(f"kind IN ({v.placeholders(len(self.kinds))})")
                values += self.kinds
            seen = self._seen.get(partition)
            if seen:
                where.append(f"id NOT IN ({v.placeholders(len(seen))})")
                values += seen
            if closed:
                where.append(
                    f"(rate_class IS NULL OR rate_class NOT IN ({v.placeholders(len(closed))}))"
                )
                values += closed
            parts.append(
                f"SELECT * FROM (SELECT {i} AS i, id, rate_class, weight, priority, scheduled_at "
                f"FROM {self.table} WHERE {' AND '.join(where)} ORDER BY {_ORDER} LIMIT %s) t{i}"
            )
            params += [*values, n]
        self.cursor.execute(" UNION ALL ".join(parts), params)
        return list(self.cursor.fetchall())

    def decide(self, job: Any, partition: str) -> Verdict:
        job_id, cls, weight = job
        admission = self.admission
        if admission.consider(self.cursor, job_id, partition, cls, weight):
            return Verdict.ADMITTED
        ceiling = admission.ceiling
        if partition in admission.full and ceiling is not None and ceiling.on_saturated == "queue":
            return Verdict.FULL
        return Verdict.PASSED


def claim_fair(
    cursor: Any,
    conn: BaseDatabaseWrapper,
    queue: str,
    admission: Any,
    kinds: Sequence[str] | None,
) -> bool:
    """Run the round-robin for a fair queue's claim (``admission`` collects what it
    admits); whether the queue is fair (if not, the caller claims it in plain order)."""
    cursor.execute(
        "SELECT f.quantum, f.credit_cap, f.turn, f.credit, d.partition_key, d.deficit "
        "FROM headgate_fairness f LEFT JOIN headgate_partition_deficit d ON d.queue = f.queue "
        "WHERE f.queue = %s",
        [queue],
    )
    rows = cursor.fetchall()
    if not rows:
        return False
    quantum, cap, turn, credit = rows[0][:4]
    carried = {r[4]: r[5] for r in rows if r[4] is not None}
    walk = Walk(Ledger(turn, credit, carried), quantum, cap)
    walk.run(FairSource(cursor, conn, queue, admission, kinds, quantum), admission.need)
    _save(cursor, queue, walk, (turn, credit))
    return True


def _save(cursor: Any, queue: str, walk: Walk, was: tuple[str | None, int]) -> None:
    """Write back what the walk changed: the turn, and the partitions' carried credit."""
    ledger = walk.ledger
    if (ledger.turn, ledger.credit) != was:
        cursor.execute(
            "UPDATE headgate_fairness SET turn = %s, credit = %s WHERE queue = %s",
            [ledger.turn, ledger.credit, queue],
        )
    if walk.touched:
        touched = sorted(walk.touched)
        cursor.execute(
            "DELETE FROM headgate_partition_deficit WHERE queue = %s "
            f"AND partition_key IN ({v.placeholders(len(touched))})",
            [queue, *touched],
        )
        for partition in touched:
            if partition in ledger.deficits:
                cursor.execute(
                    "INSERT INTO headgate_partition_deficit (queue, partition_key, deficit) "
                    "VALUES (%s, %s, %s)",
                    [queue, partition, ledger.deficits[partition]],
                )


#: Partitions :func:`turn_ahead` counts at most.
_AHEAD_LIMIT = 1000


def turn_ahead(
    cursor: Any, conn: BaseDatabaseWrapper, queue: str, partition: str
) -> dict[str, Any] | None:
    """Why a waiting job of ``partition`` in a fair queue waits for other tenants: the
    partition the next claim serves and how many visits come before this partition's
    (counted up to :data:`_AHEAD_LIMIT`), or ``None`` when its own turn is next."""
    cursor.execute(
        "SELECT quantum, credit_cap, turn, credit FROM headgate_fairness WHERE queue = %s",
        [queue],
    )
    found = cursor.fetchone()
    if found is None:
        return None
    quantum, cap, turn, credit = found
    source = FairSource(cursor, conn, queue, None, None, quantum)
    current = source.next_partition(turn, inclusive=turn is not None and credit > 0)
    if current is None or current == partition:
        return None
    ahead, key = 1, source.next_partition(current, inclusive=False)
    while ahead < _AHEAD_LIMIT and key is not None and key not in (partition, current):
        key = source.next_partition(key, inclusive=False)
        ahead += 1
    cursor.execute(
        "SELECT deficit FROM headgate_partition_deficit WHERE queue = %s AND partition_key = %s",
        [queue, partition],
    )
    carried = cursor.fetchone()
    return {
        "queue": queue,
        "partition_key": partition,
        "turn": current,
        "partitions_ahead": ahead,
        "quantum": quantum,
        "credit_cap": cap,
        "deficit": carried[0] if carried else 0,
    }

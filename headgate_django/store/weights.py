"""Weighted-fair selection between governed queues a claim serves (Headgate's ledger).

A queue's weight and its ledger (``dispatched``, the jobs claims took from it while
weights applied) live in its ``headgate_queue_state`` row. A claim reads the ledger of the
queues it serves and takes what it needs from the queue at the lowest virtual position
(:func:`headgate_django.kernel.fairness.weighted_order`), in that queue's own transaction,
which adds what it took to the queue's ``dispatched`` under the row lock every claim of the
queue holds. One queue per claim, not a split of every claim: a claim is then one
transaction, as without weights, and the ledger evens the shares out over the next claims
(a queue leads or lags its share by at most one claim). The ledger is exact; two claims
running at once may both read it before either writes, which skews the choice of one
claim, never the count. What a queue could not use (it ran dry, or its ceiling is full)
goes to the next queue in the same claim (work-conserving), and a queue that ran dry is
brought level with the others' virtual time, so it is not owed a burst when work returns.
The levels are computed here; ``claim_one`` may write them in the transaction of the queue
that fills the claim (PostgreSQL's governed claim function does, saving a commit per claim
while a queue is dry), and otherwise they are written after the claim, one conditional
update each. Priority still orders jobs only within a queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.kernel.fairness import idle_floor, weighted_order
from headgate_django.store import vendor as v

#: ``claim_one(queue, n, levels)``: claim up to ``n`` jobs of ``queue`` (moving its
#: ledger); if that fills them, it may also write ``levels`` (queue → ledger value, each
#: only where the stored one is lower) in the same transaction. Returns the rows and
#: whether it wrote the levels.
ClaimOne = Callable[[str, int, dict[str, int]], tuple[list[Any], bool]]


def claim_weighted(
    conn: BaseDatabaseWrapper, served: Sequence[str], limit: int, claim_one: ClaimOne
) -> list[Any]:
    """Claim up to ``limit`` jobs from ``served``, by ``claim_one`` in ledger order; the
    rows it returned."""
    book = _book(conn, served)
    rows: list[Any] = []
    dry: set[str] = set()
    leveled: dict[str, int] | None = None
    for queue in weighted_order(book):
        need = limit - len(rows)
        if need <= 0:
            break
        levels: dict[str, int] = {}
        if dry:  # what the dry queues are raised to if this queue fills the claim
            ahead = dict(book)
            ahead[queue] = (book[queue][0] + need, book[queue][1])
            levels = _levels(ahead, dry)
        got, wrote = claim_one(queue, need, levels)
        rows += got
        book[queue] = (book[queue][0] + len(got), book[queue][1])
        if len(got) < need:
            dry.add(queue)
        elif wrote:
            leveled = levels
    if leveled is not None:
        book.update((q, (level, book[q][1])) for q, level in leveled.items())
    elif dry:
        _level(conn, book, dry)
    return rows


#: Seconds a process trusts its view of a ledger between reads, counting its own claims
#: into it meanwhile (as ``store.admitted`` trusts its view of the policies).
_BOOK_TTL = 0.25
_books: dict[tuple[str, tuple[str, ...]], tuple[float, dict[str, tuple[int, int]]]] = {}
_books_lock = threading.Lock()


def forget_books() -> None:
    """Drop the cached ledgers (a weight changed in this process)."""
    with _books_lock:
        _books.clear()


def _book(conn: BaseDatabaseWrapper, served: Sequence[str]) -> dict[str, tuple[int, int]]:
    """The ledger of ``served`` (queue → ``(dispatched, weight)``), read from the store at
    most every :data:`_BOOK_TTL` seconds. Between reads the caller updates the returned
    dict in place with what it claimed, so a process's own claims move its view at once;
    other processes' claims show at the next read. Only the choice of queue uses this view;
    the ledger itself is written in each claim's transaction."""
    key = (conn.alias, tuple(served))
    now = time.monotonic()
    with _books_lock:
        known = _books.get(key)
        if known is not None and now - known[0] < _BOOK_TTL:
            return known[1]
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT name, weight, dispatched FROM headgate_queue_state "
            f"WHERE name IN ({v.placeholders(len(served))})",
            list(served),
        )
        book = {name: (dispatched, weight or 1) for name, weight, dispatched in cursor.fetchall()}
    with _books_lock:
        _books[key] = (now, book)
    return book


def _levels(book: dict[str, tuple[int, int]], dry: set[str]) -> dict[str, int]:
    """The ledger values that bring the queues that ran dry level with the busy ones'
    virtual time, for those behind it."""
    floor = idle_floor(book, [q for q in book if q not in dry])
    levels = {queue: floor(queue) for queue in sorted(dry)}
    return {queue: level for queue, level in levels.items() if level > book[queue][0]}


def _level(conn: BaseDatabaseWrapper, book: dict[str, tuple[int, int]], dry: set[str]) -> None:
    """Raise the ledger of queues that ran dry (:func:`_levels`), one conditional update
    each, after the claim."""
    levels = _levels(book, dry)
    with conn.cursor() as cursor:
        for queue, level in levels.items():
            book[queue] = (level, book[queue][1])
            cursor.execute(
                "UPDATE headgate_queue_state SET dispatched = %s WHERE name = %s AND dispatched < %s",
                [level, queue, level],
            )


def ledger_add(cursor: Any, queue: str, n: int) -> None:
    """Count ``n`` jobs claimed from ``queue`` (inside the claim holding its row lock)."""
    if n:
        cursor.execute(
            "UPDATE headgate_queue_state SET dispatched = dispatched + %s WHERE name = %s",
            [n, queue],
        )

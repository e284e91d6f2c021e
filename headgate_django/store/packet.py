"""MySQL/MariaDB's ``max_allowed_packet``: the largest statement the server accepts.

MySQLdb sends every parameter inside the statement's text, escaped, so one big value (a
job's result) or many values written together (a worker's batched acknowledgements) can
make a statement the server refuses with error 1153, which also ends the session. MariaDB
10.11 defaults to 16 MiB, below the default ``MAX_RESULT_BYTES`` of 32 MiB. The store
measures what it sends against the server's own limit instead: one value too large for it
is refused like a value over the setting (:class:`ResultTooLargeError` for a result,
:class:`PayloadTooLargeError` for a payload or a durable input), and values written
together (a batched ack, a pass's history events, an enqueue batch) are split into
statements that fit. Where the database has no such limit every helper returns at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.exceptions import PayloadTooLargeError, ResultTooLargeError
from headgate_django.store import vendor as v

T = TypeVar("T")

#: Room left in a statement for its SQL text and its other parameters (ids, leases).
STATEMENT_SLACK = 64 * 1024


def max_packet(conn: BaseDatabaseWrapper) -> int | None:
    """The server's ``max_allowed_packet`` (asked once per session), or None where the
    database has no such limit on a statement."""
    if conn.vendor != "mysql":
        return None

    def ask() -> int:
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@max_allowed_packet")
            return int(cursor.fetchone()[0])

    return v.per_session(conn, "max_allowed_packet", ask)


def value_budget(conn: BaseDatabaseWrapper) -> int | None:
    """The most bytes one value may take in a statement, or None without a limit, or while
    the database cannot be asked.

    A session that died with the database asks again on its next use: an outage then is
    no reason to fail what is being measured (a handler's result, which would run its job
    again). What is written next waits for the database like any other write, and its
    new session measures again."""
    try:
        packet = max_packet(conn)
    except (OperationalError, InterfaceError):
        return None
    return None if packet is None else packet - STATEMENT_SLACK


def sent_size(param: Any) -> int:
    """The bytes a string (or bytes) parameter takes in a MySQL statement: its UTF-8 bytes,
    one more for each character MySQLdb escapes (JSON holds no raw control character, so
    quotes and backslashes are all there is to count)."""
    if isinstance(param, memoryview):
        param = bytes(param)
    if isinstance(param, bytes | bytearray):
        # A sealed payload is binary: NUL, CR, LF and Ctrl-Z are escaped there too.
        return len(param) + sum(param.count(c) for c in _ESCAPED_BYTES)
    if not isinstance(param, str):
        return 0
    return len(param.encode()) + param.count("\\") + param.count("'") + param.count('"')


_ESCAPED_BYTES = (b"\\", b"'", b'"', b"\0", b"\n", b"\r", b"\x1a")


def most_sent(param: Any) -> int:
    """The most bytes ``param`` can take in a statement, without reading it: twice its
    length (every byte escaped), or four bytes a character for text that is not ASCII."""
    if isinstance(param, bytes | bytearray | memoryview):
        return 2 * len(param)
    if not isinstance(param, str):
        return 0
    return (2 if param.isascii() else 4) * len(param)


def split(
    conn: BaseDatabaseWrapper,
    items: list[T],
    param: Callable[[T], Any],
    overhead: int,
    too_large: Callable[[T, int, int], Exception],
) -> list[list[T]]:
    """``items`` (each writing ``param(item)`` and up to ``overhead`` bytes of its own) in
    statements that fit the server's packet: all in one where there is no limit or they
    plainly fit, else measured and grouped; one too large alone raises
    ``too_large(item, sent, budget)`` before anything is written."""
    budget = value_budget(conn)
    if budget is None or sum(most_sent(param(i)) + overhead for i in items) <= budget:
        return [items]
    sizes: list[int] = []
    for item in items:
        sizes.append(sent_size(param(item)) + overhead)
        if sizes[-1] > budget:
            raise too_large(item, sizes[-1], budget)
    indexed = statements(range(len(items)), sizes.__getitem__, budget)
    return [[items[i] for i in group] for group in indexed]


def check_value_sent(conn: BaseDatabaseWrapper, param: Any, what: str) -> None:
    """Refuse ``param`` (a prepared value bounded by ``MAX_PAYLOAD_BYTES``: a durable
    input, a signal's payload) too large for a statement, with
    :class:`PayloadTooLargeError`; measured only when it could be."""
    budget = value_budget(conn)
    if budget is None or most_sent(param) <= budget:
        return
    sent = sent_size(param)
    if sent > budget:
        message = too_large_message(what, sent, budget, "MAX_PAYLOAD_BYTES")
        raise PayloadTooLargeError(message, size=sent, limit=budget)


def check_json_sent(conn: BaseDatabaseWrapper, value: Any, size: int, what: str) -> None:
    """:func:`check_value_sent` for a JSON value of ``size`` bytes (UTF-8) not prepared
    yet: prepared and measured only when it could be too large."""
    budget = value_budget(conn)
    if budget is None or size * _MOST_EXPANSION <= budget:
        return
    from headgate_django.store.rows import prep

    check_value_sent(conn, prep(conn, "result", value), what)


def too_large_message(what: str, sent: int, budget: int, setting: str) -> str:
    """The message of a value refused for the packet: what to change, and where."""
    return (
        f"{what} is {sent} bytes as sent to the database, over its max_allowed_packet less "
        f"{STATEMENT_SLACK} for the statement ({budget} bytes); raise max_allowed_packet on "
        f"the server, or lower HEADGATE['{setting}'] so such values fail early"
    )


def statements(items: Iterable[T], size: Callable[[T], int], budget: int) -> Iterator[list[T]]:
    """``items`` in groups whose sizes add up to at most ``budget`` (an item over it alone
    in its group: the caller refuses it first)."""
    group: list[T] = []
    used = 0
    for item in items:
        n = size(item)
        if group and used + n > budget:
            yield group
            group, used = [], 0
        group.append(item)
        used += n
    if group:
        yield group


#: How much larger than its UTF-8 JSON a value can be as sent: the ORM writes non-ASCII
#: characters as ``\uXXXX`` (7 bytes for a 2-byte character, with the backslash escaped).
_MOST_EXPANSION = 4


def check_result_sent(conn: BaseDatabaseWrapper, result: Any, size: int) -> Any:
    """Refuse a result (``size`` bytes of UTF-8 JSON, as :func:`check_result` measured it)
    the server could not take in a statement, with the :class:`ResultTooLargeError` of the
    size limit; return its parameter when it was prepared (None when it plainly fits)."""
    budget = value_budget(conn)
    if budget is None or size * _MOST_EXPANSION <= budget:
        return None
    from headgate_django.store.rows import prep

    param = prep(conn, "result", result)
    check_param_sent(conn, param)
    return param


def check_param_sent(conn: BaseDatabaseWrapper, param: Any) -> int:
    """The bytes ``param`` (a prepared result) takes in a statement, refused over the
    server's budget."""
    budget = value_budget(conn)
    sent = sent_size(param)
    if budget is not None and sent > budget:
        packet = max_packet(conn)
        raise ResultTooLargeError(
            f"result is {sent} bytes as sent to the database, over its max_allowed_packet of "
            f"{packet} bytes less {STATEMENT_SLACK} for the statement (raise max_allowed_packet "
            "on the server, or lower HEADGATE['MAX_RESULT_BYTES'] so results fail early)",
            size=sent,
            limit=budget,
        )
    return sent

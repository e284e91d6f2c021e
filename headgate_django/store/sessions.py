"""Transactions a sync handler opened on its thread's connections and never closed.

A worker thread writes each attempt's outcome on its own connections, then runs the next
job on them. An ``atomic()`` block the handler entered and never left (or autocommit it
turned off) would hold all of that in a transaction nothing ever commits: outcomes never
land, the rows they touch stay locked against the acker and other workers, and once
Django closes such a connection it refuses every later query. So the worker rolls back,
after each handler, whatever the handler left open (:func:`roll_back_left_open`). The
same holds for the threads on which ``sync_to_async`` runs an ``async def`` handler's ORM
code: the worker checks them after each async attempt, or each call
(``worker.async_runner``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.exceptions import TransactionLeftOpenError
from headgate_django.store.vendor import thread_storage


def roll_back_left_open() -> list[str]:
    """Roll back every transaction open on this thread's connections; the aliases that had
    one. Called where the thread holds none of its own (between two attempts)."""
    left = []
    for conn in _thread_connections():
        if not _in_transaction(conn):
            continue  # nearly always: one attribute read per connection
        left.append(conn.alias)
        try:
            _roll_back(conn)
        except DatabaseError:  # a dead session: a new one replaces it
            with contextlib.suppress(DatabaseError):
                conn.close()
    return left


def thread_connection_storage() -> dict[str, Any] | None:
    """This thread's connection storage (wrappers by alias, and whatever else Django keeps
    there, such as asgiref's ``cvar`` once an event loop ran in the thread), live:
    connections the thread makes later appear in it. For another thread to look at with
    :func:`may_hold_transaction`; None where it is not a ``threading.local``."""
    storage = thread_storage()
    return None if storage is None else vars(storage)


def may_hold_transaction(storage: dict[str, Any]) -> bool:
    """Whether a connection in another thread's ``storage`` (:func:`thread_connection_storage`) may
    hold a transaction. Read without that thread, so True is a suspicion only (it may be
    inside a block it will leave); False is certain for what that thread left behind once
    its call returned, which is all a caller that awaited that call asks."""
    return any(
        _in_transaction(c) for c in list(storage.values()) if isinstance(c, BaseDatabaseWrapper)
    )


def _in_transaction(conn: BaseDatabaseWrapper) -> bool:
    return conn.in_atomic_block or _autocommit_off(conn)


def _roll_back(conn: BaseDatabaseWrapper) -> None:
    # Each block is left as an exception leaves it, innermost first: the outermost rolls
    # the transaction back and turns autocommit on again, with Django's own bookkeeping.
    while conn.in_atomic_block and conn.atomic_blocks:
        error = TransactionLeftOpenError()
        conn.atomic_blocks[-1].__exit__(TransactionLeftOpenError, error, None)
    if _autocommit_off(conn):  # set_autocommit(False) outside any block
        conn.rollback()
        conn.set_autocommit(True)


def _autocommit_off(conn: BaseDatabaseWrapper) -> bool:
    """Whether an open session runs without the autocommit its settings give it."""
    return (
        conn.connection is not None
        and not conn.autocommit
        and bool(conn.settings_dict["AUTOCOMMIT"])
    )


def _thread_connections() -> Iterable[BaseDatabaseWrapper]:
    """The connection wrappers this thread has made: ``connections.all(initialized_only=
    True)``, without asgiref's toll (see ``vendor.connection_for``)."""
    storage = thread_connection_storage()
    if storage is None:
        return connections.all(initialized_only=True)
    return [c for c in storage.values() if isinstance(c, BaseDatabaseWrapper)]

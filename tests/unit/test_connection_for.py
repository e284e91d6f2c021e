"""``connection_for`` is ``connections[using]``, wherever it is asked from.

It reads Django's per-thread storage directly when no event loop runs; these tests hold it
to Django's own answer in each place that storage could differ: a thread's first lookup,
another thread, a wrapper put in place by hand (as live-server tests share one), inside a
running event loop, and in the thread ``sync_to_async`` runs code in.
"""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async
from django.db import connections

from headgate_django.store.vendor import connection_for


def test_it_is_django_connection_in_this_thread():
    assert connection_for("default") is connections["default"]


def test_a_new_thread_gets_its_own_wrapper():
    seen: dict[str, object] = {}

    def work() -> None:
        seen["first"] = connection_for("default")  # nothing stored yet in this thread
        seen["again"] = connection_for("default")
        seen["django"] = connections["default"]

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen["first"] is seen["again"] is seen["django"]
    assert seen["first"] is not connections["default"]


def test_a_wrapper_set_by_hand_is_the_one_returned():
    def work() -> None:
        original = connections["default"]
        connections["default"] = shared
        try:
            seen.append(connection_for("default"))
        finally:
            connections["default"] = original

    shared = connections["default"]
    seen: list[object] = []
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [shared]


def test_inside_a_running_event_loop_django_answers():
    async def main() -> tuple[object, object, object]:
        in_loop = (connection_for("default"), connections["default"])
        in_worker_thread = await sync_to_async(
            lambda: (connection_for("default"), connections["default"])
        )()
        return (*in_loop, in_worker_thread)

    loop_conn, loop_django, (thread_conn, thread_django) = asyncio.run(main())
    assert loop_conn is loop_django
    assert thread_conn is thread_django

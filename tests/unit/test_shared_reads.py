"""The console's shared reads (:mod:`headgate_django.console.shared`), with plain coroutines
for the read and the render: one read per view in flight, a version served for one
interval, the same data never rendered twice, a failure raised and not kept, and an entry
that lives only while a socket holds its view."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from headgate_django.console import shared


class Source:
    """A read that counts its calls, returns ``value`` (or raises ``error``) after
    ``delay``, and a render that counts its calls."""

    def __init__(self, value: Any = "v1", delay: float = 0.0) -> None:
        self.value, self.delay = value, delay
        self.error: Exception | None = None
        self.reads = self.renders = 0

    async def read(self) -> Any:
        self.reads += 1
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.value

    async def render(self, data: Any) -> str:
        self.renders += 1
        return f"<p>{data}</p>"

    async def version(self, hold: shared.Shared) -> shared.Version:
        return await hold.read(self.read, self.render)


@pytest.fixture(autouse=True)
def no_entries_left() -> Any:
    yield
    assert shared._entries == {}


def test_sockets_of_one_view_wait_for_the_one_read_in_flight() -> None:
    async def scenario() -> None:
        source = Source(delay=0.05)
        holds = [shared.Shared("overview", 1.0) for _ in range(12)]
        versions = await asyncio.gather(*(source.version(h) for h in holds))
        assert (source.reads, source.renders) == (1, 1)
        assert {id(v) for v in versions} == {id(versions[0])}
        assert versions[0].rendered == "<p>v1</p>"
        for hold in holds:
            hold.release()

    asyncio.run(scenario())


def test_a_version_serves_for_one_interval_and_the_same_data_is_not_rendered_again() -> None:
    async def scenario() -> None:
        source = Source()
        hold = shared.Shared("overview", 0.1)
        first = await source.version(hold)
        assert await source.version(hold) is first and source.reads == 1
        assert 0.05 < hold.wait() <= 0.1
        await asyncio.sleep(hold.wait())
        assert await source.version(hold) is first  # read again, same data: same version
        assert (source.reads, source.renders) == (2, 1)
        source.value = "v2"
        await asyncio.sleep(hold.wait())
        second = await source.version(hold)
        assert second is not first and second.rendered == "<p>v2</p>"
        assert (source.reads, source.renders) == (3, 2)
        hold.release()

    asyncio.run(scenario())


def test_a_socket_that_polls_slowly_wakes_when_its_slower_read_is_due() -> None:
    """A socket between bursts (on a cross-process layer) polls every few seconds: it
    counts from its view's last read, whoever made it, so the view's slow sockets wake
    together and share one read."""

    async def scenario() -> None:
        source = Source()
        hold = shared.Shared("workflow", 0.1)
        await source.version(hold)
        assert 0.9 < hold.wait(1.0) <= 1.0
        assert 0.05 < hold.wait() <= 0.1
        hold.release()

    asyncio.run(scenario())


def test_views_with_different_keys_do_not_share() -> None:
    async def scenario() -> None:
        with_workers, without = Source("workers"), Source("no workers")
        a = shared.Shared(("overview", ("workers", True)), 1.0)
        b = shared.Shared(("overview", ("workers", False)), 1.0)
        assert (await with_workers.version(a)).data == "workers"
        assert (await without.version(b)).data == "no workers"
        assert (with_workers.reads, without.reads) == (1, 1)
        a.release()
        b.release()

    asyncio.run(scenario())


def test_a_failed_read_reaches_every_waiter_and_is_not_kept() -> None:
    async def scenario() -> None:
        source = Source(delay=0.02)
        holds = [shared.Shared("overview", 0.1) for _ in range(3)]
        assert (await source.version(holds[0])).data == "v1"
        await asyncio.sleep(holds[0].wait())
        source.error = RuntimeError("database gone")
        results = await asyncio.gather(*(source.version(h) for h in holds), return_exceptions=True)
        assert [str(r) for r in results] == ["database gone"] * 3
        assert source.reads == 2
        # Not served from the failed read, nor from the version before it: read again,
        # although the next poll is a whole interval away.
        assert holds[1].wait() > 0.05
        source.error, source.value = None, "v2"
        assert (await source.version(holds[1])).data == "v2"
        assert source.reads == 3
        for hold in holds:
            hold.release()

    asyncio.run(scenario())


def test_a_waiter_cancelled_leaves_the_read_to_the_others() -> None:
    async def scenario() -> None:
        source = Source(delay=0.05)
        leaving, staying = shared.Shared("overview", 1.0), shared.Shared("overview", 1.0)
        first = asyncio.ensure_future(source.version(leaving))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(source.version(staying))
        first.cancel()
        leaving.release()
        assert (await second).data == "v1" and source.reads == 1
        assert first.cancelled()
        staying.release()

    asyncio.run(scenario())


def test_an_entry_lives_while_a_socket_holds_its_view() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        a, b = shared.Shared("overview", 1.0), shared.Shared("overview", 1.0)
        assert list(shared._entries) == [(loop, "overview")]
        a.release()
        a.release()  # twice: still one holder
        assert list(shared._entries) == [(loop, "overview")]
        b.release()
        assert shared._entries == {}

    asyncio.run(scenario())


def test_sockets_on_two_event_loops_each_read_on_their_own() -> None:
    """The test client runs a loop per test, on other threads: a read in flight on one
    loop cannot be awaited from another."""
    results: list[Any] = []
    start = threading.Barrier(2)

    def on_a_loop() -> None:
        async def scenario() -> None:
            source = Source(delay=0.05)
            holds = [shared.Shared("overview", 1.0) for _ in range(3)]
            start.wait()
            versions = await asyncio.gather(*(source.version(h) for h in holds))
            results.append((source.reads, [v.data for v in versions]))
            for hold in holds:
                hold.release()

        asyncio.run(scenario())

    threads = [threading.Thread(target=on_a_loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(1, ["v1"] * 3)] * 2

"""The live consumers, driven with Channels' ``WebsocketCommunicator``: staff get a snapshot
and then the changes a worker in another process makes; everyone else is refused; the
sample project's stack validates the origin. Both change paths are covered: polling on the
in-memory layer, and publishing through Redis (when a Redis server is reachable)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.test import Client

from headgate_django import durable, testing
from headgate_django.console import consumers
from headgate_django.console.consumers import LiveConsumer
from headgate_django.console.groups import workflow_group
from headgate_django.console.publish import publish
from headgate_django.console.routing import websocket_urlpatterns
from headgate_django.models import Job
from headgate_django.workflows import SignalEmission, emit_signal_with
from tests.console.conftest import signal_workflow

#: How long a change may take to reach an open page (the acceptance point).
LIVE_WITHIN = 2.0
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def communicator(path: str, user: Any, app: Any = None, **kwargs: Any) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(app or URLRouter(websocket_urlpatterns), path, **kwargs)
    if user is not None:
        comm.scope["user"] = user
    return comm


def counting_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, ...]]:
    """The arguments of each call the consumers make to their module's ``name`` (a read of
    the store), counted around the real function."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(consumers, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((*args, *kwargs.values()))
        return real(*args, **kwargs)

    monkeypatch.setattr(consumers, name, counted)
    return calls


async def open_pages(path: str, users: list[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """A socket of ``path`` per user, opened all at once; each with its first snapshot."""
    comms = [communicator(path, user) for user in users]
    opened = await asyncio.gather(*(comm.connect(timeout=10) for comm in comms))
    assert all(connected for connected, _ in opened), opened
    firsts = [await comm.receive_json_from(timeout=10) for comm in comms]
    assert all(first["type"] == "snapshot" for first in firsts), firsts
    return [(comm, first["snapshot"]) for comm, first in zip(comms, firsts, strict=True)]


def nodes_in(message: dict[str, Any]) -> list[dict[str, Any]]:
    return message.get("nodes") or message.get("snapshot", {}).get("nodes") or []


async def wait_until_committed(job_id: str, state: str, timeout: float = 60) -> float:
    """Poll the database (from this process) until the job is in ``state``; the loop time then."""
    loop = asyncio.get_running_loop()
    read = database_sync_to_async(
        lambda: Job.objects.filter(pk=job_id).values_list("state", flat=True).first()
    )
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await read() == state:
            return loop.time()
        await asyncio.sleep(0.02)
    raise AssertionError(f"{job_id} never reached {state}")


async def wait_for_node(
    comm: WebsocketCommunicator, name: str, state: str, timeout: float = 60
) -> float:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        message = await comm.receive_json_from(timeout=max(0.01, deadline - loop.time()))
        if any(n["name"] == name and n["state"] == state for n in nodes_in(message)):
            return loop.time()


def run_worker_and_measure(
    user: Any, start_worker: Callable[..., Any], workflow_id: str, env: dict[str, str] | None = None
) -> float:
    """Open the workflow's socket, let a worker process complete ``extract``, and return how
    long after the commit the page heard about it."""

    async def scenario() -> float:
        comm = communicator(f"/ws/headgate/workflows/{workflow_id}/", user)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        first = await comm.receive_json_from(timeout=10)
        assert first["type"] == "snapshot"
        states = {n["name"]: n["state"] for n in first["snapshot"]["nodes"]}
        assert states == {"extract": "available", "approved": "pending", "load": "pending"}
        start_worker("--burst", "--queue", "default", env=env)
        committed = asyncio.ensure_future(
            wait_until_committed(f"{workflow_id}:extract", "completed")
        )
        heard = await wait_for_node(comm, "extract", "completed")
        done = await committed
        await comm.disconnect()
        return heard - done

    return async_to_sync(scenario)()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_staff_receives_a_change_made_by_a_worker_process(
    viewer: Any, start_worker: Callable[..., Any]
) -> None:
    signal_workflow("live-wf")
    latency = run_worker_and_measure(viewer, start_worker, "live-wf")
    assert latency < LIVE_WITHIN, f"the change reached the page {latency:.2f} s after its commit"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["anonymous", "outsider", "staff_without_perms"])
def test_everyone_but_staff_is_refused(who: str, request: pytest.FixtureRequest) -> None:
    signal_workflow("refused-wf")
    user = AnonymousUser() if who == "anonymous" else request.getfixturevalue(who)

    async def scenario() -> None:
        for path in (
            "/ws/headgate/workflows/refused-wf/",
            "/ws/headgate/executions/anything/",
            "/ws/headgate/schedules/?tz=UTC",
        ):
            comm = communicator(path, user)
            connected, code = await comm.connect(timeout=5)
            assert (connected, code) == (False, 4403), path

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_workflow_socket_needs_the_workflow_view_permission(db: Any) -> None:
    from tests.console.conftest import make_user

    signal_workflow("perm-wf")
    jobs_only = make_user("jobs-only", staff=True, perms=["view_job"])
    flows = make_user("flows", staff=True, perms=["view_workflowcheckpoint"])

    async def scenario() -> None:
        comm = communicator("/ws/headgate/workflows/perm-wf/", jobs_only)
        assert await comm.connect(timeout=5) == (False, 4403)
        comm = communicator("/ws/headgate/workflows/perm-wf/", flows)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_sample_project_validates_origin_and_reads_the_session(viewer: Any) -> None:
    from sampleproject.asgi import application

    signal_workflow("origin-wf")
    client = Client()
    client.force_login(viewer)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    path = "/ws/headgate/workflows/origin-wf/"

    async def scenario() -> None:
        evil = communicator(
            path,
            None,
            application,
            headers=[(b"origin", b"http://evil.example"), (b"cookie", cookie)],
        )
        assert (await evil.connect(timeout=5))[0] is False
        no_session = communicator(
            path, None, application, headers=[(b"origin", b"http://testserver")]
        )
        assert await no_session.connect(timeout=5) == (False, 4403)
        good = communicator(
            path,
            None,
            application,
            headers=[(b"origin", b"http://testserver"), (b"cookie", cookie)],
        )
        assert (await good.connect(timeout=5))[0] is True
        assert (await good.receive_json_from(timeout=10))["type"] == "snapshot"
        await good.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_execution_page_follows_its_operation(viewer: Any, console_data: Any) -> None:
    execution = console_data.execution_waiting

    async def scenario() -> None:
        comm = communicator(f"/ws/headgate/executions/{execution}/", viewer)
        assert (await comm.connect(timeout=10))[0]
        first = (await comm.receive_json_from(timeout=10))["snapshot"]
        assert first["pending"] == ["op:1"] and first["state"] == "running"
        await database_sync_to_async(testing.run_jobs)()  # the Operation, then the last pass
        while True:
            message = await comm.receive_json_from(timeout=10)
            if message["snapshot"]["state"] == "succeeded":
                break
        snap = message["snapshot"]
        assert snap["pending"] == [] and snap["operations"][0]["status"] == "completed"
        assert snap["events"][0]["type"] == "WorkflowCompleted"
        await comm.disconnect()

    async_to_sync(scenario)()
    assert durable.Manager().get(execution).state == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_a_page_of_a_missing_workflow_is_told_it_is_gone(viewer: Any) -> None:
    async def scenario() -> None:
        comm = communicator("/ws/headgate/workflows/never-was/", viewer)
        assert (await comm.connect(timeout=5))[0]
        assert await comm.receive_json_from(timeout=5) == {"type": "gone"}
        assert (await comm.receive_output(timeout=5))["type"] == "websocket.close"

    async_to_sync(scenario)()


def _redis_reachable() -> bool:
    try:
        import channels_redis  # noqa: F401
    except ImportError:
        return False
    parts = urlsplit(REDIS_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 0.5):
            return True
    except OSError:
        return False


def use_redis_layer(settings: Any) -> str:
    """Make the test's channel layer Redis, under a prefix of its own (returned)."""
    prefix = f"hgtest{uuid.uuid4().hex[:8]}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
                "prefix": prefix,
            },
        }
    }
    return prefix


@pytest.mark.slow
@pytest.mark.skipif(
    not _redis_reachable(), reason="needs channels-redis and a Redis server (REDIS_URL)"
)
@pytest.mark.django_db(transaction=True)
def test_with_redis_the_worker_publishes_the_change(
    viewer: Any, start_worker: Callable[..., Any], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = use_redis_layer(settings)
    # Without a publish the consumer would look only every minute: a fast update proves
    # the worker's message arrived.
    monkeypatch.setattr(LiveConsumer, "idle_interval", 60.0)
    signal_workflow("redis-wf")
    env = {"HEADGATE_TEST_REDIS_URL": REDIS_URL, "HEADGATE_TEST_REDIS_PREFIX": prefix}
    latency = run_worker_and_measure(viewer, start_worker, "redis-wf", env=env)
    assert latency < LIVE_WITHIN, f"the change reached the page {latency:.2f} s after its commit"


@pytest.mark.django_db(transaction=True)
def test_the_schedule_list_follows_a_pause_and_a_tick(viewer: Any) -> None:
    """The schedule list's socket: a snapshot in the zone asked for, then a new one when a
    schedule is paused and when a pass records a tick."""
    from headgate_django import schedules
    from headgate_django.models import Schedule
    from headgate_django.schedules.scheduler import run_pass
    from tests.app import tasks

    schedules.upsert("live-hourly", "@every 1h", tasks.periodic.envelope())

    async def scenario() -> None:
        comm = communicator("/ws/headgate/schedules/?tz=Europe/Berlin&site=admin", viewer)
        assert (await comm.connect(timeout=10))[0] is True
        first = await comm.receive_json_from(timeout=10)
        assert first["type"] == "snapshot" and first["snapshot"]["zone"] == "Europe/Berlin"
        (row,) = first["snapshot"]["schedules"]
        assert row["paused"] is False and len(row["next_runs"]) == 5 and row["events"] == []
        await database_sync_to_async(schedules.pause)("live-hourly")
        paused = await comm.receive_json_from(timeout=10)
        assert paused["snapshot"]["schedules"][0]["paused"] is True

        def tick() -> None:
            schedules.resume("live-hourly")
            Schedule.objects.filter(name="live-hourly").update(next_run_at=db_now())
            run_pass()

        from headgate_django.store import db_now

        await database_sync_to_async(tick)()
        while True:
            message = await comm.receive_json_from(timeout=10)
            (row,) = message["snapshot"]["schedules"]
            if row["events"]:
                break
        assert [e["outcome"] for e in row["events"]] == ["enqueued"]
        assert row["events"][0]["url"]  # the tick's job
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "query", ["state__exact=failed", "q=" + "x" * 256, "state__exact=%00", "queue__exact=%00"]
)
def test_a_refused_job_list_socket_closes_cleanly(viewer: Any, query: str) -> None:
    """A filter no job list has is refused before the handshake, and the disconnect that
    follows (the server always sends one) does not fail either."""

    async def scenario() -> None:
        comm = communicator(f"/ws/headgate/jobs/?{query}", viewer)
        assert await comm.connect(timeout=5) == (False, 4403)
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "path",
    [
        "/ws/headgate/workflows/a\x00b/",
        "/ws/headgate/executions/a\x00b/",
        "/ws/headgate/job/a\x00b/",
        "/ws/headgate/jobs/?q=a%00",
        "/ws/headgate/jobs/?kind__exact=a%00",
        "/ws/headgate/schedules/?after=a%00",
    ],
)
def test_a_nul_character_in_a_socket_id_or_query_is_refused(viewer: Any, path: str) -> None:
    """No stored id or name holds NUL, and PostgreSQL refuses it in a query: such a socket
    is refused before the handshake instead of failing on its first read."""

    async def scenario() -> None:
        comm = communicator(path, viewer)
        assert await comm.connect(timeout=5) == (False, 4403)
        await comm.disconnect()

    async_to_sync(scenario)()


async def closed_with(comm: WebsocketCommunicator, timeout: float = 10) -> int:
    """The close code the server sends next, skipping the updates before it."""
    while True:
        output = await comm.receive_output(timeout=timeout)
        if output["type"] == "websocket.close":
            return int(output["code"])


def closes_after(user: Any, workflow_id: str, change: Callable[[], None], code: int) -> None:
    """``user``'s open graph page of ``workflow_id`` is closed with ``code`` after
    ``change``."""

    async def scenario() -> None:
        comm = communicator(f"/ws/headgate/workflows/{workflow_id}/", user)
        assert (await comm.connect(timeout=5))[0]
        assert (await comm.receive_json_from(timeout=10))["type"] == "snapshot"
        await database_sync_to_async(change)()
        assert await closed_with(comm) == code

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change", ["not staff", "deactivated", "permission revoked", "deleted"])
def test_an_open_socket_closes_once_its_user_loses_access(
    viewer: Any, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connect's check held only while the socket opened: a page left open kept
    receiving the workflow's changes after its user lost access."""
    monkeypatch.setattr(LiveConsumer, "recheck_interval", 0.2)
    signal_workflow("revoked-wf")

    def revoke() -> None:
        if change == "not staff":
            viewer.is_staff = False
            viewer.save()
        elif change == "deactivated":
            viewer.is_active = False
            viewer.save()
        elif change == "permission revoked":
            viewer.user_permissions.clear()
        else:
            type(viewer).objects.filter(pk=viewer.pk).delete()

    closes_after(viewer, "revoked-wf", revoke, 4403)


@pytest.mark.django_db(transaction=True)
def test_a_socket_whose_user_loses_the_payload_permission_reconnects_for_a_new_snapshot(
    reader: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LiveConsumer, "recheck_interval", 0.2)
    signal_workflow("reveal-wf")

    def revoke() -> None:
        reader.user_permissions.remove(reader.user_permissions.get(codename="view_job_payload"))

    closes_after(reader, "reveal-wf", revoke, 4000)


@pytest.mark.django_db(transaction=True)
def test_a_session_socket_closes_when_its_user_logs_out(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sampleproject.asgi import application

    monkeypatch.setattr(LiveConsumer, "recheck_interval", 0.2)
    signal_workflow("logout-wf")
    client = Client()
    client.force_login(viewer)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    headers = [(b"origin", b"http://testserver"), (b"cookie", cookie)]

    async def scenario() -> None:
        comm = communicator("/ws/headgate/workflows/logout-wf/", None, application, headers=headers)
        assert (await comm.connect(timeout=5))[0]
        assert (await comm.receive_json_from(timeout=10))["type"] == "snapshot"
        assert await comm.receive_nothing(timeout=0.6)  # rechecked meanwhile: still allowed
        await database_sync_to_async(client.logout)()
        assert await closed_with(comm) == 4403

    async_to_sync(scenario)()


def live_watchers() -> list[asyncio.Task[Any]]:
    """The consumers' watcher tasks still running on this event loop."""
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__qualname__", "") == "LiveConsumer._watch"
    ]


async def open_graph(user: Any, workflow_id: str) -> WebsocketCommunicator:
    comm = communicator(f"/ws/headgate/workflows/{workflow_id}/", user)
    assert (await comm.connect(timeout=5))[0]
    assert (await comm.receive_json_from(timeout=10))["type"] == "snapshot"
    assert len(live_watchers()) == 1
    return comm


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "frame",
    [
        {"text": "not json"},
        {"text": ""},
        {"bytes": b"\x00\x01"},
        {"text": "[" * 100_000},
        {"text": json.dumps({"type": "expand", "groups": ["group:x" * 50_000]})},
    ],
    ids=["not-json", "empty", "binary", "nested", "oversized"],
)
def test_an_unreadable_frame_closes_the_socket_and_its_watcher(
    viewer: Any, frame: dict[str, Any]
) -> None:
    """A frame a page never sends ended the consumer with an error, and its watcher went
    on polling the database for a socket nobody read, for as long as the session lasted:
    one such frame per socket piled up pollers. It closes the socket with 4400 now."""
    signal_workflow("unreadable-wf")

    async def scenario() -> None:
        comm = await open_graph(viewer, "unreadable-wf")
        await comm.send_input({"type": "websocket.receive", **frame})
        assert await closed_with(comm) == 4400
        await comm.disconnect()
        await asyncio.sleep(0.05)
        assert live_watchers() == []

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_consumer_that_fails_takes_its_watcher_with_it(viewer: Any) -> None:
    """Whatever ends a consumer, its watcher ends too. A receive event with neither text
    nor bytes makes Channels itself raise, before any consumer code runs."""
    signal_workflow("failing-wf")

    async def scenario() -> None:
        comm = await open_graph(viewer, "failing-wf")
        await comm.send_input({"type": "websocket.receive"})
        with pytest.raises(KeyError):
            await comm.receive_output(timeout=5)
        await asyncio.sleep(0.05)
        assert live_watchers() == []

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_user_past_the_socket_cap_is_closed_with_4429_and_others_are_not(
    viewer: Any, reader: Any, settings: Any
) -> None:
    """Each open socket polls the database: one user (or a stolen session) opening
    hundreds loaded it without limit. Past the cap a socket is closed, without a watcher,
    and a slot frees when one of the user's sockets ends."""
    settings.HEADGATE = {"CONSOLE_MAX_SOCKETS_PER_USER": 2}
    signal_workflow("capped-wf")

    async def over_cap(user: Any) -> None:
        comm = communicator("/ws/headgate/workflows/capped-wf/", user)
        assert (await comm.connect(timeout=5))[0]  # accepted, so the page sees the code
        assert await closed_with(comm) == 4429
        await comm.disconnect()

    async def scenario() -> None:
        first = await open_graph(viewer, "capped-wf")
        second = communicator("/ws/headgate/workflows/capped-wf/", viewer)
        assert (await second.connect(timeout=5))[0]
        assert (await second.receive_json_from(timeout=10))["type"] == "snapshot"
        await over_cap(viewer)
        assert len(live_watchers()) == 2
        other = communicator("/ws/headgate/overview/", reader)  # another user: not capped
        assert (await other.connect(timeout=5))[0]
        assert (await other.receive_json_from(timeout=10))["type"] == "snapshot"
        await other.disconnect()
        await first.disconnect()
        third = communicator("/ws/headgate/workflows/capped-wf/", viewer)
        assert (await third.connect(timeout=5))[0]
        assert (await third.receive_json_from(timeout=10))["type"] == "snapshot"
        await over_cap(viewer)
        await second.disconnect()
        await third.disconnect()

    async_to_sync(scenario)()


async def received(comm: WebsocketCommunicator) -> list[dict[str, Any]]:
    """The messages a socket was sent and has not read yet."""
    messages = []
    while not await comm.receive_nothing(timeout=0.01):
        messages.append(await comm.receive_json_from())
    return messages


@pytest.mark.django_db(transaction=True)
def test_open_graph_pages_share_one_fingerprint_read_per_poll(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each open graph page read its workflow's fingerprint every 0.5 s, and built its own
    snapshot when it moved, on the process's one thread for ORM calls: twenty screens on
    one large workflow kept that thread busy and a new socket's handshake timed out. The
    sockets of one view share the reads and the snapshot; each is still sent the change."""
    reads = counting_calls(monkeypatch, "workflow_fingerprint")
    builds = counting_calls(monkeypatch, "workflow_snapshot")
    signal_workflow("shared-wf")
    polls = 4  # of 0.5 s each

    async def scenario() -> tuple[int, int, int]:
        comms = [
            comm for comm, _ in await open_pages("/ws/headgate/workflows/shared-wf/", [viewer] * 8)
        ]
        at_connect = len(builds)
        reads.clear()
        await asyncio.sleep(polls * LiveConsumer.poll_interval)
        during = len(reads)
        builds.clear()
        await database_sync_to_async(testing.run_jobs)(include_scheduled=True)
        for comm in comms:
            await wait_for_node(comm, "extract", "completed", timeout=10)
        await asyncio.sleep(2 * LiveConsumer.poll_interval)  # the coordinator's follow-up
        for comm in comms:
            await received(comm)
            await comm.disconnect()
        return at_connect, during, len(builds)

    at_connect, during, changed = async_to_sync(scenario)()
    assert during <= polls + 2, f"{during} fingerprint reads in {polls} polls of 8 sockets"
    assert at_connect <= 2, f"{at_connect} snapshots built for 8 sockets opened together"
    assert changed <= 4, f"{changed} snapshots built for a change seen by 8 sockets"


@pytest.mark.django_db(transaction=True)
def test_graph_pages_of_two_workflows_each_show_their_own(viewer: Any) -> None:
    signal_workflow("own-a")
    signal_workflow("own-b")

    async def scenario() -> None:
        opened = [
            *await open_pages("/ws/headgate/workflows/own-a/", [viewer, viewer]),
            *await open_pages("/ws/headgate/workflows/own-b/", [viewer, viewer]),
        ]
        await database_sync_to_async(testing.run_jobs)(include_scheduled=True)
        for (comm, first), workflow_id in zip(opened, ["own-a"] * 2 + ["own-b"] * 2, strict=True):
            assert first["workflow_id"] == workflow_id
            await wait_for_node(comm, "extract", "completed", timeout=10)
            shown = [first, *await received(comm)]
            assert {n["job_id"].split(":")[0] for m in shown for n in nodes_in(m)} == {workflow_id}
            await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_graph_pages_share_nothing_between_users_who_see_payloads_and_who_do_not(
    viewer: Any, reader: Any
) -> None:
    """A snapshot built for a user with ``view_job_payload`` holds signal payloads: the
    sockets of a user without it never share it."""
    signal_workflow("reveal-shared-wf")
    testing.run_jobs(include_scheduled=True)  # extract completes; approved waits

    async def scenario() -> None:
        users = [reader, viewer, reader, viewer]
        opened = await open_pages("/ws/headgate/workflows/reveal-shared-wf/", users)
        emission = SignalEmission("approved", "ops-1", {"secret": "s3"}, {"by": "ops"})
        await database_sync_to_async(emit_signal_with)("reveal-shared-wf", emission)
        for (comm, first), user in zip(opened, users, strict=True):
            assert first["signals_revealed"] is (user is reader)
            deadline = asyncio.get_running_loop().time() + 10
            shown = [first]
            while not any(m.get("signals") for m in shown):
                assert asyncio.get_running_loop().time() < deadline, shown
                shown.append(await comm.receive_json_from(timeout=10))
            shown += await received(comm)
            (signal,) = next(m["signals"] for m in shown if m.get("signals"))
            assert ("payload" in signal) is (user is reader), (user.username, signal)
            assert ("s3" in json.dumps(shown)) is (user is reader)
            await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_every_graph_page_of_a_deleted_workflow_is_told_it_is_gone(viewer: Any) -> None:
    from headgate_django.models import WorkflowCheckpoint
    from headgate_django.store.workflows import coordinator_job_id

    signal_workflow("deleted-wf")

    def delete() -> None:
        Job.objects.filter(workflow_id="deleted-wf").delete()
        Job.objects.filter(pk=coordinator_job_id("deleted-wf")).delete()
        WorkflowCheckpoint.objects.filter(pk="deleted-wf").delete()

    async def scenario() -> None:
        opened = await open_pages("/ws/headgate/workflows/deleted-wf/", [viewer] * 4)
        await database_sync_to_async(delete)()
        for comm, _ in opened:
            messages = []
            while (output := await comm.receive_output(timeout=10))["type"] != "websocket.close":
                messages.append(json.loads(output["text"]))
            assert messages[-1:] == [{"type": "gone"}] and output["code"] == 4404
        later = communicator("/ws/headgate/workflows/deleted-wf/", viewer)
        assert (await later.connect(timeout=5))[0]
        assert await later.receive_json_from(timeout=5) == {"type": "gone"}

    async_to_sync(scenario)()


@pytest.mark.skipif(
    not _redis_reachable(), reason="needs channels-redis and a Redis server (REDIS_URL)"
)
@pytest.mark.django_db(transaction=True)
def test_with_redis_a_wake_served_the_views_last_read_looks_again_within_a_poll(
    viewer: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sockets that wake on ``headgate.changed`` share the view's read: one woken right
    after a read is sent that read, made before the change it was woken for, and must look
    again within ``poll_interval`` (it polls fast for a while after a wake) rather than
    wait for its next idle check."""
    use_redis_layer(settings)
    monkeypatch.setattr(LiveConsumer, "idle_interval", 60.0)
    signal_workflow("wake-wf")
    testing.run_jobs(include_scheduled=True)  # extract completes; approved waits
    emission = SignalEmission("approved", "ops-1", {"ok": True}, {"by": "ops"})

    async def scenario() -> None:
        opened = await open_pages("/ws/headgate/workflows/wake-wf/", [viewer] * 4)
        await asyncio.sleep(LiveConsumer.poll_interval)  # past the connect's read
        publish([workflow_group("wake-wf")])  # a wake with nothing new: the view reads
        await asyncio.sleep(0.05)
        await database_sync_to_async(emit_signal_with)("wake-wf", emission)
        publish([workflow_group("wake-wf")])
        woken = asyncio.get_running_loop().time()
        for comm, _ in opened:
            while "signals" not in (message := await comm.receive_json_from(timeout=5)):
                pass
            assert message["signals"][0]["signal"] == "approved"
            await comm.disconnect()
        took = asyncio.get_running_loop().time() - woken
        assert took < LIVE_WITHIN, f"seen {took:.2f} s after the wake, not at the next poll"

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_job_lists_share_reads_only_with_the_same_query_every_value_counted(
    viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job list filters by the last value of a repeated argument: two lists whose queries
    differ only past the first value are two views, each read with its own filter."""
    reads = counting_calls(monkeypatch, "job_page_fingerprint")
    paths = [
        "/ws/headgate/jobs/?state__exact=available&state__exact=running",
        "/ws/headgate/jobs/?state__exact=available&state__exact=completed",
    ]

    async def scenario() -> None:
        opened = [opened for path in paths for opened in await open_pages(path, [viewer] * 2)]
        await asyncio.sleep(2 * consumers.JobListConsumer.poll_interval)
        for comm, _ in opened:
            await comm.disconnect()

    async_to_sync(scenario)()
    assert {args[0] for args in reads} == {"running", "completed"}
    assert len(reads) <= 2 * (2 + 2), f"{len(reads)} job list reads in 2 polls of 2 views"

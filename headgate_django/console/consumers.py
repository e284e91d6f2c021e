"""WebSocket consumers that keep a workflow or execution page live.

On connect a consumer checks the user (active staff with the page's view permission;
anyone else is refused before the handshake completes), sends the current snapshot, then
watches for changes and sends only what changed.

How it notices changes depends on the channel layer:

- **In-memory layer** (the embedded default): workers run in other processes and cannot
  reach this one, so the consumer re-reads a cheap fingerprint (a few indexed aggregates,
  see :mod:`headgate_django.store.console`) every ``poll_interval`` and rebuilds the
  snapshot only when the fingerprint moved.
- **Cross-process layer** (Redis): workers publish ``headgate.changed`` after the commit
  that finished a job (:mod:`headgate_django.console.publish`). The consumer wakes at
  once, then keeps polling fast for ``burst_seconds`` to catch the coordinator's
  follow-up writes, and otherwise only checks every ``idle_interval`` as a safety net.

The sockets of one process that show the same view (:meth:`LiveConsumer.view_key`) share
each fingerprint read and the snapshot built when it moved
(:mod:`headgate_django.console.shared`), and wake together when the view's next read is
due: twenty screens on one large workflow cost the thread for ORM calls one fingerprint
read per poll and one snapshot per change, not twenty. What a socket was sent, and so the
difference it is sent next, stays its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Hashable
from typing import Any
from urllib.parse import parse_qs
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from asgiref.sync import sync_to_async
from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer

from headgate_django.console import access, links, shared, sockets
from headgate_django.console.dashboard import (
    overview_data,
    overview_html,
    workers_data,
    workers_html,
)
from headgate_django.console.executions import execution_diff, execution_snapshot
from headgate_django.console.fanout import GROUP_PREFIX, MAX_EXPANDED
from headgate_django.console.groups import (
    DURABLE_PREFIX,
    SCHEDULES_GROUP,
    execution_group,
    workflow_group,
)
from headgate_django.console.joblist import JOB_LIST_FILTERS, MAX_FILTER_CHARS
from headgate_django.console.jobpage import progress_html
from headgate_django.console.schedules import schedule_links, schedules_snapshot
from headgate_django.console.snapshots import diff, regroup, workflow_snapshot
from headgate_django.exceptions import NotFoundError
from headgate_django.kernel.states import State
from headgate_django.store.console import (
    execution_fingerprint,
    job_live_state,
    job_page_fingerprint,
    workflow_fingerprint,
)
from headgate_django.store.schedules import schedule_fingerprint
from headgate_django.visibility import may_see_payloads

log = logging.getLogger(__name__)
REFUSED = 4403  # close code: not allowed (the handshake is rejected, or access was lost)
GONE = 4404  # close code: the workflow or execution no longer exists
#: Close code: the user may now see more or less user data than the page was built with;
#: the page reconnects and gets a snapshot built for what it may see now.
RECONNECT = 4000
#: Close code: a frame the console cannot read (binary, longer than
#: :data:`MAX_FRAME_CHARS`, or not JSON). Pages send nothing but small JSON text frames.
UNREADABLE = 4400
#: Close code: the user already holds ``HEADGATE["CONSOLE_MAX_SOCKETS_PER_USER"]`` open
#: sockets in this process (:mod:`headgate_django.console.sockets`). Sent after the
#: handshake, so that the page can tell it from a refusal and retry slowly.
TOO_MANY = 4429
#: The longest frame a page sends: an ``expand`` naming :data:`MAX_EXPANDED` group ids.
MAX_FRAME_CHARS = 256 * 1024


def query_site(scope: dict[str, Any]) -> str:
    """The admin site the page was served by (``?site=``), for the links it shows."""
    return parse_qs(scope.get("query_string", b"").decode()).get("site", ["admin"])[0]


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Sends a snapshot on connect and a diff whenever what the page shows changes."""

    permission = access.VIEW_JOBS
    id_kwarg = ""
    poll_interval = 0.5
    idle_interval = 5.0
    burst_seconds = 3.0
    #: How often an open socket checks its user again: a logout, an expired session, a
    #: deactivated account or a revoked permission closes it within this time.
    recheck_interval = 10.0
    # Set before ``connect`` can refuse: the disconnect that follows a refusal reads them.
    watcher: asyncio.Task[None] | None = None
    group: str | None = None
    #: The user key this socket is counted under (:mod:`~headgate_django.console.sockets`).
    counted: Any = None
    #: This socket's hold on its view's shared reads (from its first read on).
    reads: shared.Shared | None = None

    # -- what a subclass supplies (sync: they run in a database thread) --------------
    def group_for(self, object_id: str) -> str:
        raise NotImplementedError

    def read_fingerprint(self) -> Any:
        """What tells whether the page changed. Like :meth:`build_snapshot`, it may depend
        on nothing but what :meth:`view_key` holds."""
        raise NotImplementedError

    def build_snapshot(self, fingerprint: Any) -> dict[str, Any]:
        """What the page shows, as of ``fingerprint``. The sockets of a view are all sent
        the one snapshot built for whichever of them read the fingerprint; no socket may
        change it in place."""
        raise NotImplementedError

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError

    def view_of(self, user: Any) -> dict[str, bool]:
        """What the page shows ``user`` besides what its permission opens: whether it
        reveals user data. A change of it makes an open page reconnect for a snapshot
        built anew (see :meth:`_access_changed`)."""
        return {"reveal": may_see_payloads(user)}

    def view_key(self) -> Hashable:
        """What tells one view from another: the page, its object, its whole query (the
        admin site among it, which the links depend on) and what the user's permissions
        show of it (:meth:`view_of`, which a socket checks again every
        ``recheck_interval``). Two sockets share reads only if all of it is the same, so
        none is sent what its user may not see."""
        return (
            type(self),
            self.object_id,
            tuple(sorted((key, tuple(values)) for key, values in self.arguments.items())),
            tuple(sorted(self.view.items())),
        )

    # -- lifecycle -------------------------------------------------------------------
    async def connect(self) -> None:
        user = self.scope.get("user")
        object_id = self.scope["url_route"]["kwargs"].get(self.id_kwarg, "")
        query = parse_qs(self.scope.get("query_string", b"").decode())
        texts = [object_id, *query, *(value for values in query.values() for value in values)]
        allowed = database_sync_to_async(access.is_console_user)
        if not access.storable(*texts) or not await allowed(user, self.permission):
            await self.close(code=REFUSED)
            return
        if not sockets.take(user.pk):
            await self.accept()
            await self.close(code=TOO_MANY)
            return
        self.counted = user.pk
        self.object_id = object_id
        self.site_name = query_site(self.scope)
        self.view = await database_sync_to_async(self.view_of)(user)
        self.reveal = self.view["reveal"]
        self.query = {key: values[0] for key, values in query.items()}
        #: Every value of every query argument: a page's view may depend on any of them.
        self.arguments = query
        self.job_url = links.job_url_builder(self.site_name)
        self.wake = asyncio.Event()
        self.burst_until = 0.0
        self.in_process = self.channel_layer is None or isinstance(
            self.channel_layer, InMemoryChannelLayer
        )
        self.group = self.group_for(self.object_id)
        if self.channel_layer is not None:
            await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        version = await self._version()
        if version is None:
            return
        self.version = version
        self.shown = await self._own(version.rendered)
        await self.send_json({"type": "snapshot", "snapshot": self.shown})
        self.watcher = asyncio.ensure_future(self._watch())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Whatever ends the consumer — the socket's disconnect, or an error in a handler —
        ends its watcher and group membership too: a watcher left behind goes on polling
        the database, for a socket nobody reads, until its user's session ends."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.counted is not None:
                sockets.give_back(self.counted)
            if self.watcher is not None:
                self.watcher.cancel()
            if self.reads is not None:
                self.reads.release()
            if self.group is not None and self.channel_layer is not None:
                await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """A frame that is not a JSON text of at most :data:`MAX_FRAME_CHARS` closes the
        socket with :data:`UNREADABLE`, instead of failing the consumer on the decode (and
        before a page-sized budget of decoding work is spent on it)."""
        if text_data is None or len(text_data) > MAX_FRAME_CHARS:
            await self.close(code=UNREADABLE)
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            await self.close(code=UNREADABLE)
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The console is read-only: nothing a page sends changes anything."""

    async def headgate_changed(self, event: dict[str, Any]) -> None:
        """A worker published a change (cross-process layers only): look now."""
        self.burst_until = asyncio.get_running_loop().time() + self.burst_seconds
        self.wake.set()

    # -- watching --------------------------------------------------------------------
    def _interval(self) -> float:
        """Until the view's next read is due: ``poll_interval`` after its last one, or
        ``idle_interval`` while this socket polls slowly. The view's sockets wake together
        and share that read."""
        fast = self.in_process or asyncio.get_running_loop().time() < self.burst_until
        assert self.reads is not None  # the watcher starts after the connect's first read
        return self.reads.wait(None if fast else self.idle_interval)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        recheck_at = loop.time() + self.recheck_interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self._interval())
            self.wake.clear()
            try:
                if loop.time() >= recheck_at:
                    recheck_at = loop.time() + self.recheck_interval
                    code = await self._access_changed()
                    if code is not None:
                        await self.close(code=code)
                        return
                if not await self._check():
                    return
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup must not end the page's live updates
                log.warning("console update for %s failed", self.object_id, exc_info=True)

    async def _check(self) -> bool:
        """Send what changed, if anything; False once the object is gone."""
        version = await self._version()
        if version is None:
            return False
        if version is self.version:
            return True
        self.version = version
        snapshot = await self._own(version.rendered)
        message = self.diff(self.shown, snapshot)
        self.shown = snapshot
        if message is not None:
            await self.send_json(message)
        return True

    async def _access_changed(self) -> int | None:
        """The close code if the user may no longer see this page, or the page would now
        show them more or less (:meth:`view_of`); None if nothing changed. The connect's
        check holds only while the socket is open: a session can end and a permission can
        be revoked while a page stays open for days."""
        session = await database_sync_to_async(access.session_now)(self.scope.get("session"))
        if session is not None:
            user = await get_user({**self.scope, "session": session})
        else:
            user = await database_sync_to_async(access.reloaded)(self.scope.get("user"))
        if not await database_sync_to_async(access.is_console_user)(user, self.permission):
            return REFUSED
        if await database_sync_to_async(self.view_of)(user) != self.view:
            return RECONNECT
        return None

    async def _version(self) -> shared.Version | None:
        """The view's shared version: its fingerprint, read once per poll for all the
        view's sockets in this process, and the snapshot built for it once each time it
        moved. None once the object is gone, after telling the page: every socket that
        waited for the read that found it gone is told, and nothing is kept of that read,
        so a socket that opens later reads again and is told too."""
        if self.reads is None:
            self.reads = shared.Shared(self.view_key(), self.poll_interval)
        try:
            return await self.reads.read(
                database_sync_to_async(self.read_fingerprint), self._render
            )
        except NotFoundError:
            await self.send_json({"type": "gone"})
            await self.close(code=GONE)
            return None

    async def _render(self, fingerprint: Any) -> dict[str, Any]:
        """The view's snapshot as of ``fingerprint``, built on the thread for ORM calls."""
        return await database_sync_to_async(self.build_snapshot)(fingerprint)

    async def _own(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """What this socket shows of its view's snapshot (see :meth:`build_snapshot`)."""
        return snapshot


class WorkflowConsumer(LiveConsumer):
    """``ws/headgate/workflows/<workflow_id>/?expand=<group id>…``: a DAG workflow's graph
    page. Which fan-out groups are drawn expanded is the page's view, not data: the page
    says so in the URL and, on a click, in an ``{"type": "expand", "groups": [...]}``
    message, answered with the graph drawn again for it (``{"type": "drawing"}``)."""

    id_kwarg = "workflow_id"
    permission = access.VIEW_WORKFLOWS
    expanded: frozenset[str] = frozenset()

    async def connect(self) -> None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.expanded = _group_ids(query.get("expand", []))
        await super().connect()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Only a view change: which groups to draw expanded. Anything else is ignored."""
        if not isinstance(content, dict) or content.get("type") != "expand":
            return
        groups = content.get("groups")
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            return
        self.expanded = _group_ids(groups)
        if self.shown is None:
            return
        # What the page shows, drawn again: the watcher sends any change since as usual.
        drawing = await self._drawing(self.shown)
        self.shown = {**self.shown, **drawing}
        await self.send_json({"type": "drawing", "drawing": drawing})

    def group_for(self, object_id: str) -> str:
        return workflow_group(object_id)

    def read_fingerprint(self) -> Any:
        return workflow_fingerprint(self.object_id)

    def build_snapshot(self, fingerprint: Any) -> dict[str, Any]:
        """Every fan-out drawn grouped: which groups a page expands is the socket's own
        (it changes on a click), and is drawn on its copy (:meth:`_own`)."""
        return workflow_snapshot(self.object_id, reveal=self.reveal, job_url=self.job_url)

    async def _own(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        return {**snapshot, **await self._drawing(snapshot)} if self.expanded else snapshot

    async def _drawing(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """``snapshot`` drawn with this page's expanded groups, off the thread for ORM
        calls, which the view's reads may hold."""
        return await sync_to_async(regroup, thread_sensitive=False)(snapshot, self.expanded)

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return diff(old, new)


def _group_ids(values: list[str]) -> frozenset[str]:
    """At most :data:`MAX_EXPANDED` group ids, each no longer than a node name may be."""
    return frozenset(
        v for v in values[:MAX_EXPANDED] if v.startswith(GROUP_PREFIX) and len(v) <= 512
    )


class ExecutionConsumer(LiveConsumer):
    """``ws/headgate/executions/<execution_id>/``: a durable execution's page."""

    permission = access.VIEW_EXECUTIONS
    id_kwarg = "execution_id"

    def group_for(self, object_id: str) -> str:
        return execution_group(object_id)

    def read_fingerprint(self) -> Any:
        return execution_fingerprint(self.object_id, DURABLE_PREFIX + self.object_id)

    def build_snapshot(self, fingerprint: Any) -> dict[str, Any]:
        return execution_snapshot(self.object_id, reveal=self.reveal, job_url=self.job_url)

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return execution_diff(old, new)


class FragmentConsumer(LiveConsumer):
    """A page drawn by the server (:mod:`headgate_django.console.dashboard`): its data is
    its own fingerprint, and a change sends the page's fragment again.

    Nothing publishes these pages' changes (that would cost every ack a message), so they
    poll on every channel layer, once a second. Like every live page, the sockets of one
    process that show the same view share each read and its rendering: twenty open
    overviews cost the thread for ORM calls one overview read a second, not twenty, and
    leave it free for the handshakes of new sockets.
    """

    poll_interval = 1.0
    idle_interval = 1.0
    group_name = ""

    def group_for(self, object_id: str) -> str:
        return self.group_name

    def render(self, data: dict[str, Any]) -> str:
        raise NotImplementedError

    def build_snapshot(self, fingerprint: Any) -> dict[str, Any]:
        return {"html": self.render(fingerprint)}

    async def _render(self, fingerprint: Any) -> dict[str, Any]:
        """The page's fragment, rendered off the thread for ORM calls (it reads nothing)."""
        return await sync_to_async(self.build_snapshot, thread_sensitive=False)(fingerprint)

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return {"type": "snapshot", "snapshot": new} if old != new else None


class OverviewConsumer(FragmentConsumer):
    """``ws/headgate/overview/``: the dashboard; its worker column needs ``view_worker``."""

    group_name = "headgate.overview"

    def view_of(self, user: Any) -> dict[str, bool]:
        return {
            **super().view_of(user),
            "workers": access.is_console_user(user, access.VIEW_WORKERS),
        }

    def read_fingerprint(self) -> dict[str, Any]:
        return overview_data(site_name=self.site_name, show_workers=self.view["workers"])

    def render(self, data: dict[str, Any]) -> str:
        return overview_html(data)


class WorkersConsumer(FragmentConsumer):
    """``ws/headgate/workers/``: the worker registry."""

    permission = access.VIEW_WORKERS
    group_name = "headgate.workers"

    def read_fingerprint(self) -> dict[str, Any]:
        return workers_data()

    def render(self, data: dict[str, Any]) -> str:
        return workers_html(data)


class SchedulesConsumer(LiveConsumer):
    """``ws/headgate/schedules/?tz=<zone>&after=<name>``: the schedule list.

    Nothing publishes a schedule change (a pass touches many schedules at once), so this
    one polls its fingerprint — two indexed aggregates — at ``poll_interval`` on every
    channel layer, and sends the page's new snapshot when it moved.
    """

    permission = access.VIEW_SCHEDULES
    poll_interval = 1.0
    idle_interval = 1.0

    def group_for(self, object_id: str) -> str:
        return SCHEDULES_GROUP

    def read_fingerprint(self) -> Any:
        return schedule_fingerprint()

    def build_snapshot(self, fingerprint: Any) -> dict[str, Any]:
        zone = self.query.get("tz") or "UTC"
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            zone = "UTC"
        site = self.query.get("site", "admin")
        after = self.query.get("after") or None
        return schedules_snapshot(zone=zone, after=after, links=schedule_links(site))

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return {"type": "snapshot", "snapshot": new} if new != old else None


_STATES = {s.value for s in State}
#: Rows on the job list's first page (``JobAdmin.list_per_page``).
JOB_PAGE = 100


class JobListConsumer(LiveConsumer):
    """``ws/headgate/jobs/?state__exact=…&q=…``: the first page of the job list.

    It sends no rows: the page re-fetches itself when told ``changed``, so what it shows
    goes through the admin's own filters, permissions and cells. The fingerprint is the
    first page's ids and states (one indexed ``LIMIT`` query per poll)."""

    poll_interval = 1.0
    idle_interval = 1.0  # enqueues publish nothing: poll at the fast rate throughout

    async def connect(self) -> None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        values = {k: v[-1] for k, v in query.items() if k in (*JOB_LIST_FILTERS, "q")}
        bad = any(len(v) > MAX_FILTER_CHARS for v in values.values()) or (
            "state__exact" in values and values["state__exact"] not in _STATES
        )
        if bad:
            await self.close(code=REFUSED)
            return
        self.filters = {JOB_LIST_FILTERS.get(k, "search"): v for k, v in values.items() if v}
        await super().connect()

    def group_for(self, object_id: str) -> str:
        return "headgate.jobs"

    def read_fingerprint(self) -> Any:
        return job_page_fingerprint(**self.filters, limit=JOB_PAGE)

    def build_snapshot(self, fingerprint: Any) -> dict[str, Any]:
        return {"rows": len(fingerprint)}

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return {"type": "changed"}


class JobConsumer(FragmentConsumer):
    """``ws/headgate/job/<job_id>/``: a job page's state and progress, redrawn when the
    handler reports progress (``ctx.set_progress``) or the job moves. One read by primary
    key per poll; nothing publishes progress, which would cost every write a message."""

    id_kwarg = "job_id"

    def group_for(self, object_id: str) -> str:
        return "headgate.job"

    def read_fingerprint(self) -> dict[str, Any]:
        return {"job": job_live_state(self.object_id)}

    def render(self, data: dict[str, Any]) -> str:
        return progress_html(data["job"])

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer

from headgate_django.console import access, links
from headgate_django.console.executions import execution_diff, execution_snapshot
from headgate_django.console.groups import DURABLE_PREFIX, execution_group, workflow_group
from headgate_django.console.snapshots import diff, workflow_snapshot
from headgate_django.exceptions import NotFoundError
from headgate_django.store.console import execution_fingerprint, workflow_fingerprint
from headgate_django.visibility import may_see_payloads

log = logging.getLogger(__name__)
REFUSED = 4403  # close code: not allowed (the handshake is rejected)
GONE = 4404  # close code: the workflow or execution no longer exists


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Sends a snapshot on connect and a diff whenever what the page shows changes."""

    permission = access.VIEW_JOBS
    id_kwarg = ""
    poll_interval = 0.5
    idle_interval = 5.0
    burst_seconds = 3.0

    # -- what a subclass supplies (sync: they run in a database thread) --------------
    def group_for(self, object_id: str) -> str:
        raise NotImplementedError

    def read_fingerprint(self) -> Any:
        raise NotImplementedError

    def build_snapshot(self, job_url: Callable[[str], str]) -> dict[str, Any]:
        raise NotImplementedError

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError

    # -- lifecycle -------------------------------------------------------------------
    async def connect(self) -> None:
        self.watcher: asyncio.Task[None] | None = None
        self.group: str | None = None
        user = self.scope.get("user")
        if not await database_sync_to_async(access.is_console_user)(user, self.permission):
            await self.close(code=REFUSED)
            return
        self.object_id = self.scope["url_route"]["kwargs"][self.id_kwarg]
        self.reveal = await database_sync_to_async(may_see_payloads)(user)
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.job_url = links.job_url_builder(query.get("site", ["admin"])[0])
        self.wake = asyncio.Event()
        self.burst_until = 0.0
        self.in_process = self.channel_layer is None or isinstance(
            self.channel_layer, InMemoryChannelLayer
        )
        self.group = self.group_for(self.object_id)
        if self.channel_layer is not None:
            await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.fingerprint = await database_sync_to_async(self.read_fingerprint)()
        self.shown = await self._snapshot()
        if self.shown is None:
            return
        await self.send_json({"type": "snapshot", "snapshot": self.shown})
        self.watcher = asyncio.ensure_future(self._watch())

    async def disconnect(self, code: int) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
        if self.group is not None and self.channel_layer is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The console is read-only: nothing a page sends changes anything."""

    async def headgate_changed(self, event: dict[str, Any]) -> None:
        """A worker published a change (cross-process layers only): look now."""
        self.burst_until = asyncio.get_running_loop().time() + self.burst_seconds
        self.wake.set()

    # -- watching --------------------------------------------------------------------
    def _interval(self) -> float:
        fast = self.in_process or asyncio.get_running_loop().time() < self.burst_until
        return self.poll_interval if fast else self.idle_interval

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self._interval())
            self.wake.clear()
            try:
                if not await self._check():
                    return
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup must not end the page's live updates
                log.warning("console update for %s failed", self.object_id, exc_info=True)

    async def _check(self) -> bool:
        """Send what changed, if anything; False once the object is gone."""
        fingerprint = await database_sync_to_async(self.read_fingerprint)()
        if fingerprint == self.fingerprint:
            return True
        snapshot = await self._snapshot()
        if snapshot is None:
            return False
        self.fingerprint = fingerprint
        message = self.diff(self.shown, snapshot) if self.shown is not None else None
        self.shown = snapshot
        if message is not None:
            await self.send_json(message)
        return True

    async def _snapshot(self) -> dict[str, Any] | None:
        try:
            return await database_sync_to_async(self.build_snapshot)(self.job_url)
        except NotFoundError:
            await self.send_json({"type": "gone"})
            await self.close(code=GONE)
            return None


class WorkflowConsumer(LiveConsumer):
    """``ws/headgate/workflows/<workflow_id>/``: a DAG workflow's graph page."""

    id_kwarg = "workflow_id"

    def group_for(self, object_id: str) -> str:
        return workflow_group(object_id)

    def read_fingerprint(self) -> Any:
        return workflow_fingerprint(self.object_id)

    def build_snapshot(self, job_url: Callable[[str], str]) -> dict[str, Any]:
        return workflow_snapshot(self.object_id, reveal=self.reveal, job_url=job_url)

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return diff(old, new)


class ExecutionConsumer(LiveConsumer):
    """``ws/headgate/executions/<execution_id>/``: a durable execution's page."""

    permission = access.VIEW_EXECUTIONS
    id_kwarg = "execution_id"

    def group_for(self, object_id: str) -> str:
        return execution_group(object_id)

    def read_fingerprint(self) -> Any:
        return execution_fingerprint(self.object_id, DURABLE_PREFIX + self.object_id)

    def build_snapshot(self, job_url: Callable[[str], str]) -> dict[str, Any]:
        return execution_snapshot(self.object_id, reveal=self.reveal, job_url=job_url)

    def diff(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return execution_diff(old, new)

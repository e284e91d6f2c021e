"""Workers tell live pages that something changed, when the channel layer can carry it.

With a cross-process channel layer (Redis), the ``ON_FINISH`` store hook — which runs
inside the transaction that finishes a workflow's (or durable execution's) job — arranges
a ``headgate.changed`` group message for after the commit, so a page never re-reads before
the change is visible. The message carries no data: the consumer re-reads what it shows.

With the in-memory layer (the embedded default) a message could never leave this
process, so nothing is published and the consumers poll a cheap fingerprint instead.
Publishing is best effort: a failure is logged and never reaches the worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from headgate_django.console.groups import group_of_job_group
from headgate_django.store import hooks

log = logging.getLogger(__name__)
CHANGED = "headgate.changed"
_sending: set[asyncio.Task[None]] = set()


def cross_process_layer() -> Any | None:
    """The configured channel layer if it reaches other processes, else None."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return None
    return layer


def publish(groups: list[str]) -> None:
    """Send ``headgate.changed`` to ``groups`` now, from sync or async context."""
    layer = cross_process_layer()
    if layer is None or not groups:
        return

    async def send_all() -> None:
        for group in groups:
            await layer.group_send(group, {"type": CHANGED})

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    try:
        if loop is None:
            async_to_sync(send_all)()
        else:  # called on an event loop thread (an async handler): don't block it
            task = loop.create_task(send_all())
            _sending.add(task)  # keep a reference until it is done
            task.add_done_callback(_sending.discard)
    except Exception:
        log.warning("could not publish a console update to %s", groups, exc_info=True)


def _on_finish(cursor: Any, connection: Any, workflow_ids: set[str], job_ids: set[str]) -> None:
    if cross_process_layer() is None:
        return
    groups = sorted({group_of_job_group(w) for w in workflow_ids})
    transaction.on_commit(lambda: publish(groups), using=connection.alias)


hooks.ON_FINISH.append(_on_finish)

"""How many console sockets each user holds open in this process, under a cap.

Every open socket runs a watcher that reads the database about once a second, so one
user's hundreds of tabs, or a script replaying a stolen session cookie, would load it
without end. A user's sockets past ``HEADGATE["CONSOLE_MAX_SOCKETS_PER_USER"]`` are
closed. The count is this process's: the channel layer interface offers no shared counter
(a Redis layer's group membership outlives a process that dies without leaving its
groups, which would lock its users out for a day), so behind *n* ASGI processes a user
may hold up to *n* times the cap. Consumers of one process may run on several event
loops (the test client starts one per test), hence the lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from headgate_django.conf import headgate_settings

_open: Counter[Any] = Counter()
_lock = threading.Lock()


def take(user_key: Any) -> bool:
    """Count one more socket for ``user_key``; False, counting nothing, at the cap."""
    with _lock:
        if _open[user_key] >= headgate_settings.CONSOLE_MAX_SOCKETS_PER_USER:
            return False
        _open[user_key] += 1
        return True


def give_back(user_key: Any) -> None:
    """The socket :func:`take` counted has ended."""
    with _lock:
        _open[user_key] -= 1
        if _open[user_key] <= 0:
            del _open[user_key]

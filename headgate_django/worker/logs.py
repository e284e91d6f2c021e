"""The worker's own log output, for a project that configured none.

Django's default ``LOGGING`` gives ``headgate_django``'s loggers no handler, so Python's
last-resort handler prints their warnings bare (no time, no level) and drops everything
below: a worker in a fresh project said nothing until something failed. ``runworkers``
calls :func:`configure`, which gives those loggers a stderr handler with time and level,
at the level ``-v`` asks for, unless the project configured them (or the root logger)
itself: then the project's choice stands and ``-v`` changes nothing.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

#: One line per attempt (kind, outcome, run time) at DEBUG: shown with ``-v 3`` only.
ATTEMPTS_LOGGER = "headgate_django.attempts"
FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s"

# ``-v``: 0 errors only, 1 (the default) the banner, status lines, warnings, failures and
# the stop summary, 2 adds headgate's debug lines, 3 adds one line per attempt.
_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def project_configured(logging_setting: Any) -> bool:
    """Whether the project's ``LOGGING`` (or code run before the worker) already decides
    where headgate's records go: a ``headgate_django`` logger, or a root logger, of its own."""
    if logging.getLogger("headgate_django").handlers or logging.getLogger().handlers:
        return True
    if not isinstance(logging_setting, dict):
        return False
    loggers = logging_setting.get("loggers") or {}
    if any(name == "headgate_django" or name.startswith("headgate_django.") for name in loggers):
        return True
    root = logging_setting.get("root") or loggers.get("") or {}
    return bool(root.get("handlers"))


def configure(verbosity: int, logging_setting: Any) -> bool:
    """Give headgate's loggers a stderr handler at ``verbosity``'s level, unless the
    project configured them; say whether it did."""
    if project_configured(logging_setting):
        return False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    package = logging.getLogger("headgate_django")
    package.addHandler(handler)
    package.setLevel(_LEVELS.get(verbosity, logging.DEBUG))
    # Below 3, the per-attempt lines stay off whatever the package's level.
    logging.getLogger(ATTEMPTS_LOGGER).setLevel(logging.DEBUG if verbosity >= 3 else logging.INFO)
    return True


def start_details(*, using: str, duties: bool) -> str:
    """What the worker's start line says beside its id, queues and concurrency: where the
    jobs are, how many kinds it can run, and whether it takes maintenance duties."""
    from django.db import connections

    from headgate_django.registry import registered_kinds

    conn = connections[using]
    return (
        f"{conn.vendor} database {conn.settings_dict.get('NAME')!s} ({using}), "
        f"{len(registered_kinds())} kinds registered, duties {'on' if duties else 'off'}"
    )


def announce(processes: int, concurrency: int) -> None:
    """The command's first line: how many processes and threads it is about to start
    (each worker process then gives its own start line)."""
    logging.getLogger("headgate_django.worker").info(
        "runworkers: %d process%s × %d handler thread%s",
        processes,
        "" if processes == 1 else "es",
        concurrency,
        "" if concurrency == 1 else "s",
    )

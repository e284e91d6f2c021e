"""Leave a worker process at once, without waiting for its threads or running atexit hooks.

A worker exits this way when handler threads outlive its drain (the interpreter would
otherwise wait for them), on a second SIGTERM/SIGINT, and always in a forked child of
``--processes``, which must never return into its parent's code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from django.db import connections


def exit_now(code: int, *, close_connections: bool = True) -> NoReturn:
    """Flush logs and standard streams, close this thread's connections, ``os._exit(code)``."""
    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    if close_connections:
        with contextlib.suppress(Exception):
            connections.close_all()
    os._exit(code)

"""Leave a worker process at once, without waiting for its threads or running atexit hooks.

A worker exits this way when handler threads outlive its drain (the interpreter would
otherwise wait for them), on a second SIGTERM/SIGINT, always in a forked child of
``--processes``, which must never return into its parent's code, and at the end of a
``runworkers`` started from the command line, to skip the teardown of every imported module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from django.db import connections


def exit_code(exc: SystemExit) -> int:
    """The status a process leaving with ``exc`` reports, as the interpreter would set it."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)  # what the interpreter does with a message
    return 1


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

"""Shared fixtures. The database is whatever DATABASE_URL names (SQLite by default), so the
same suite runs unchanged on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (for servers the tests start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(
    *args: str, settings: str, pythonpath: str = "", database_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage.py *args`` in a process of its own, with the settings module ``settings``
    (found on ``pythonpath`` too) and ``database_url`` (None: the settings' default), as a
    user runs it; its output captured."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE=settings,
        PYTHONPATH=os.pathsep.join(filter(None, [pythonpath, str(ROOT)])),
    )
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


#: ``host:port`` of the PostgreSQL server behind the transaction-pooling proxy that
#: DATABASE_URL goes through (the PgBouncer leg); unset otherwise.
POOLER_BYPASS = os.environ.get("HEADGATE_TEST_POOLER_BYPASS", "")


def database_url() -> str:
    """A URL for the test database as the test run sees it (for worker subprocesses)."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    scheme = "postgresql" if connection.vendor == "postgresql" else "mysql"
    auth = quote(s["USER"] or "")
    if s["PASSWORD"]:
        auth += ":" + quote(s["PASSWORD"])
    host = s["HOST"] or "127.0.0.1"
    port = f":{s['PORT']}" if s["PORT"] else ""
    # The run's own options (``?prepare_threshold=none`` behind a pooler, say) go along.
    query = urlsplit(os.environ.get("DATABASE_URL", "")).query
    return f"{scheme}://{auth}@{host}{port}/{s['NAME']}{'?' + query if query else ''}"


@pytest.fixture
def unprepared() -> Iterator[None]:
    """Turn psycopg's prepared statements off on the test's connection for its duration.

    Django logs a statement that psycopg ran prepared without its text (``sql`` is None),
    so a test that reads captured SQL would miss it. The store is told too, so that a
    cursor it makes during the test does not turn them back on.
    """
    from django.conf import settings
    from django.db import connection
    from django.test import override_settings

    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    threshold = connection.connection.prepare_threshold
    connection.connection.prepare_threshold = None
    with override_settings(HEADGATE={**settings.HEADGATE, "PREPARE_STATEMENTS": False}):
        yield
    connection.connection.prepare_threshold = threshold


@pytest.fixture
def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["DATABASE_URL"] = database_url()
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("HEADGATE_TEST_LOG_LEVEL", "INFO")  # see tests/settings.py
    if POOLER_BYPASS:  # the database behind the pooler, for the LISTEN sessions
        pooled = urlsplit(env["DATABASE_URL"])
        user = pooled.netloc.rpartition("@")[0]
        direct = pooled._replace(netloc=f"{user}@{POOLER_BYPASS}" if user else POOLER_BYPASS)
        env["HEADGATE_TEST_DIRECT_URL"] = direct.geturl()
    return env


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


@pytest.fixture
def start_worker(
    worker_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``manage.py runworkers`` as a real subprocess; stopped (SIGKILL) at teardown."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as handle:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworkers", *args],
                env={**worker_env, **(env or {})},
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        worker = WorkerProcess(proc, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.kill()


def wait_for(
    predicate: Callable[[], object], timeout: float = 60.0, interval: float = 0.05
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout.

    The default is generous: a worker subprocess on a loaded two-core machine can take tens
    of seconds to import Django and start, and a passing test never waits it out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture
def clear_of_the_hour() -> None:
    """Keep a test of hourly ticks out of the last seconds before an hour's tick: there
    the pass's lookahead (``SCHEDULE_LOOKAHEAD``, 5 s) also writes the next hour's tick,
    and every count of enqueued ticks is one more than the test means (seen in CI)."""
    left = 3600 - time.time() % 3600
    if left < 7:
        time.sleep(left + 0.5)


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter at the project's root: what a fresh process
    imports and does, with nothing this test run has loaded."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

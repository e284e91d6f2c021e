"""Wake-ups: an idle worker starts a new job at once, not at its next poll.

PostgreSQL wakes it through LISTEN/NOTIFY, SQLite through the ``PRAGMA data_version``
watcher; MariaDB has neither and polls.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from datetime import timedelta

import pytest
from django.db import connection

from tests.app import tasks
from tests.conftest import POOLER_BYPASS, free_port, wait_for
from tests.integration.helpers import job, runs, state_is

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_idle_worker_wakes_on_enqueue(start_worker):
    if connection.vendor not in ("postgresql", "sqlite"):
        pytest.skip("MySQL/MariaDB has no wake-up source; workers poll")
    worker = start_worker(env={"HEADGATE_TEST_LOG_LEVEL": "DEBUG"})
    # The worker logs this once its idle backoff reaches the 2 s maximum (the default).
    wait_for(lambda: "idle: next poll in 2.0 s" in worker.output())

    job_id = tasks.record_run.enqueue(label="wake")
    wait_for(lambda: state_is(job_id, "completed"))

    row = job(job_id)
    (execution,) = runs(job_id)
    # Polling alone would start it up to 2 s later; the margin below is generous on purpose.
    assert row.claimed_at - row.enqueued_at < timedelta(seconds=1), worker.output()
    assert execution.started_at - row.enqueued_at < timedelta(seconds=1), worker.output()
    assert worker.terminate() == 0


class Forwarder:
    """A port that forwards to the test database while open: a LISTEN server that goes away
    (``close`` also cuts the sessions through it) and comes back."""

    def __init__(self, port: int) -> None:
        # PostgreSQL itself: behind a transaction pooler (the PgBouncer leg) the test's
        # connection is the pooler's, through which LISTEN is never proven.
        settings = connection.settings_dict
        host, _, at = POOLER_BYPASS.rpartition(":")
        self.target = (
            (host, int(at))
            if POOLER_BYPASS
            else (settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
        )
        self.server = socket.create_server(("127.0.0.1", port))
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                upstream = socket.create_connection(self.target)
                self.sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def test_a_listen_server_that_stays_down_is_reported_once_per_outage(start_worker):
    """A LISTEN server that is down leaves the worker polling. It is reported once, as the
    worker reports an unreachable database, not at every reconnect attempt; its return is
    reported, and so is the next outage."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    port = free_port()
    settings = connection.settings_dict
    worker = start_worker(
        env={
            "HEADGATE_TEST_DIRECT_URL": (
                f"postgresql://{settings['USER']}@127.0.0.1:{port}/{settings['NAME']}"
            ),
            "HEADGATE_TEST_LOG_LEVEL": "DEBUG",
        }
    )

    def warned() -> int:
        return sum(
            "WARNING" in line and "LISTEN connection failed" in line
            for line in worker.output().splitlines()
        )

    job_id = tasks.record_run.enqueue(label="polled")
    wait_for(lambda: state_is(job_id, "completed"))  # polling still serves the queue
    wait_for(lambda: "LISTEN connection failed again" in worker.output())
    assert warned() == 1, worker.output()

    forwarder = Forwarder(port)
    try:
        wait_for(lambda: "LISTEN connection back" in worker.output())
    finally:
        forwarder.close()
    wait_for(lambda: warned() == 2)
    assert worker.terminate() == 0


def test_a_sqlite_file_that_cannot_be_opened_is_reported_once_until_it_can(start_worker, tmp_path):
    """The SQLite watch retries every second; a file it cannot open (its directory missing)
    is reported once, not at every retry, and so is its return."""
    folder = tmp_path / "not-yet"
    worker = start_worker(
        env={"DATABASE_URL": f"sqlite:///{folder}/db.sqlite3", "HEADGATE_TEST_LOG_LEVEL": "DEBUG"}
    )
    wait_for(lambda: worker.output().count("SQLite wake-up watch failed") >= 3)
    warnings = [
        line
        for line in worker.output().splitlines()
        if "WARNING" in line and "SQLite wake-up watch failed" in line
    ]
    assert len(warnings) == 1, worker.output()
    folder.mkdir()
    wait_for(lambda: "SQLite wake-up watch back" in worker.output())
    assert worker.terminate() == 0

"""The fleet finds a worker's connections to the database server from outside the process
(the chaos run waits for the server to finish with them before it counts a killed worker's
leases)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from django.db import connection

from headgate_django.models import Job
from tests.app.chaos_tasks import chaos_job
from tests.chaos import audit
from tests.chaos.fleet import client_ports
from tests.chaos.run import server_now, sessions_of

_CLIENT = """
import socket, sys
conns = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(2)]
other = socket.socket(); other.bind(("127.0.0.1", 0)); other.listen()
print("ready", flush=True)
sys.stdin.read()
"""


def test_the_ports_of_a_processs_connections_to_one_server_are_listed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with subprocess.Popen(
            [sys.executable, "-c", _CLIENT, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            try:
                assert child.stdout is not None and child.stdout.readline() == "ready\n"
                accepted = [server.accept()[0] for _ in range(2)]
                peers = {conn.getpeername()[1] for conn in accepted}
                # Its two connections to this server; not its listener, not another server.
                assert client_ports(child.pid, port) == peers
                assert client_ports(child.pid, port ^ 1) == frozenset()
                for conn in accepted:
                    conn.close()
            finally:
                child.kill()


@pytest.mark.django_db
def test_the_server_counts_the_sessions_from_listed_ports() -> None:
    """What the chaos run waits on after a kill or a pause, asked about this process's own
    session."""
    if connection.vendor == "sqlite":
        pytest.skip("a file database has no sessions")
    connection.ensure_connection()
    server_port = int(connection.settings_dict["PORT"] or 0)
    ports = client_ports(os.getpid(), server_port)
    assert ports, "this process has a connection to the test database server"
    # This session is the one asking, so it is running a statement.
    assert any(sessions_of(ports).values())
    assert sessions_of(frozenset({1})) == {}
    assert sessions_of(frozenset()) == {}


@pytest.mark.django_db(transaction=True)
def test_a_lease_a_session_wrote_before_a_pause_and_committed_after_is_found() -> None:
    """What the chaos run adds to a paused worker's count: a row its open transaction had
    moved to running when it stopped, visible only once it resumed and committed."""
    if connection.vendor == "sqlite":
        pytest.skip("a file database has no sessions")
    job_id = chaos_job.enqueue(n=1)
    other = connection.copy()
    audit.install()
    try:
        other.connect()
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT pg_backend_pid()"
                if other.vendor == "postgresql"
                else "SELECT CONNECTION_ID()"
            )
            session = int(cursor.fetchone()[0])
            cursor.execute(
                "UPDATE headgate_job SET state = 'running', lease_id = 'paused:1', "
                "claimed_by = 'paused' WHERE id = %s",
                [job_id],
            )
        stopped_at = server_now()  # the worker is stopped here, its transaction open
        assert audit.leases_entered({session}, stopped_at) == 0
        other.commit()  # it resumes
        assert audit.leases_entered({session}, stopped_at) == 1
        assert audit.leases_entered({session + 1}, stopped_at) == 0
        assert audit.leases_entered({session}, Job.objects.get(id=job_id).enqueued_at) == 0
    finally:
        other.close()
        audit.uninstall()

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

from tests.chaos.fleet import client_ports
from tests.chaos.run import sessions_from

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
    """What the chaos run waits on after a kill, asked about this process's own session."""
    if connection.vendor == "sqlite":
        pytest.skip("a file database has no sessions")
    connection.ensure_connection()
    server_port = int(connection.settings_dict["PORT"] or 0)
    ports = client_ports(os.getpid(), server_port)
    assert ports, "this process has a connection to the test database server"
    assert sessions_from(ports) >= 1
    assert sessions_from(frozenset({1})) == 0
    assert sessions_from(frozenset()) == 0

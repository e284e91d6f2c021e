"""``manage.py demo`` (and ``rundemo --seed``, which runs it first) on a database that was
never migrated: the reason and the way out, not a traceback from the first query."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import free_port, manage


def test_demo_on_an_unmigrated_database_says_to_migrate(tmp_path: Path) -> None:
    done = manage(
        "demo", settings="sampleproject.settings", database_url=f"sqlite:///{tmp_path}/db.sqlite3"
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        "CommandError: the database is not migrated: run `manage.py migrate` first"
    )


@pytest.mark.parametrize("addr", ["127.0.0.1:99999", "127.0.0.1:0", ":8000"])
def test_rundemo_refuses_an_address_runserver_cannot_serve_before_it_starts(
    tmp_path: Path, addr: str
) -> None:
    """`make demo DEMO_ADDR=...` with a port out of range (or one runserver cannot take)
    is refused with the reason, not a traceback or a server that never listens."""
    done = manage(
        "rundemo",
        "--addr",
        addr,
        "--operator-addr",
        "",
        settings="sampleproject.settings",
        database_url=f"sqlite:///{tmp_path}/db.sqlite3",
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"CommandError: {addr!r} is not a host:port address with a port from 1 to 65535"
    )


def _busy_run(count: int) -> tuple[int, list[socket.socket]]:
    """``count`` consecutive loopback ports now listened on, and the one after them free:
    the first port and the listening sockets (close them)."""
    for _ in range(50):
        first = free_port()
        held: list[socket.socket] = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
                sock.listen()
            with socket.socket() as after:
                after.bind(("127.0.0.1", first + count))
        except OSError:
            for sock in held:
                sock.close()
            continue
        return first, held
    raise AssertionError("no run of free loopback ports")


@pytest.mark.parametrize(
    ("option", "variable"), [("--addr", "DEMO_ADDR"), ("--operator-addr", "DEMO_OPERATOR_ADDR")]
)
def test_rundemo_on_a_busy_port_suggests_a_free_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, variable: str
) -> None:
    """The way out names the address that is taken and a port that is free: following it
    starts the demo, instead of suggesting the very ports that are in use."""
    monkeypatch.setenv("HEADGATE_DEMO_OPERATOR", "1")
    first, held = _busy_run(2)  # the port asked for and the next one are both taken
    busy = f"127.0.0.1:{first}"
    addresses = {"--addr": f"127.0.0.1:{free_port()}", "--operator-addr": ""}
    addresses[option] = busy
    try:
        done = manage(
            "rundemo",
            *(part for pair in addresses.items() for part in pair),
            settings="sampleproject.settings",
            database_url=f"sqlite:///{tmp_path}/db.sqlite3",
        )
    finally:
        for sock in held:
            sock.close()
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        f"CommandError: {busy} is in use: stop what listens there, or choose a free port: "
        f"make demo {variable}=127.0.0.1:{first + 2} (rundemo {option} 127.0.0.1:{first + 2})"
    )


def test_rundemo_refuses_one_address_for_both_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console and the operator port cannot share an address: refused before anything
    starts, not a server that fails to listen and a demo that stops with an exit status."""
    monkeypatch.setenv("HEADGATE_DEMO_OPERATOR", "1")
    port = free_port()
    done = manage(
        "rundemo",
        "--addr",
        str(port),  # a port alone is 127.0.0.1, as runserver reads it
        "--operator-addr",
        f"127.0.0.1:{port}",
        settings="sampleproject.settings",
        database_url=f"sqlite:///{tmp_path}/db.sqlite3",
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        f"CommandError: --addr {port} and --operator-addr 127.0.0.1:{port} are one address: "
        "give each server its own port"
    )

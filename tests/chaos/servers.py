"""Private database servers for the chaos run: restarting them is part of the fault plan.

Each server lives in its own temporary directory (data, socket, log), listens on a free
loopback port and is stopped by its own process id or data directory, so a run never
touches a shared database service. PostgreSQL and MariaDB refuse to run as root: when this
process is root, they run as the ``postgres`` / ``mysql`` OS user that owns the directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.conftest import free_port

PG_BIN = Path(os.environ.get("HEADGATE_CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))
MARIADBD = os.environ.get("HEADGATE_CHAOS_MARIADBD", "/usr/sbin/mariadbd")
DATABASE = "headgate_chaos"


def _owned_dir(prefix: str, user: str) -> Path:
    """A fresh temp directory the server's OS user can write (root hands it over)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def _as(user: str, argv: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *argv] if os.geteuid() == 0 else argv


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"no server listening on 127.0.0.1:{port} after {timeout} s")


class PrivatePostgres:
    """``initdb`` + ``pg_ctl`` in a temp directory; ``url`` names database ``headgate_chaos``."""

    vendor = "postgresql"
    user = "postgres"

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = _owned_dir("headgate-chaos-pg-", self.user)
        self.data = self.dir / "data"
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"
        self.running = False

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as(self.user, [str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args]),
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def create(self) -> None:
        subprocess.run(
            _as(
                self.user,
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.start()
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    def start(self) -> None:
        # fsync off: the run restarts the server cleanly, it never crashes the machine.
        options = (
            f"-p {self.port} -h 127.0.0.1 -k {self.dir} -c fsync=off "
            "-c max_connections=300 -c full_page_writes=off"
        )
        self._ctl("-o", options, "-l", str(self.dir / "server.log"), "-w", "-t", "60", "start")
        self.running = True

    def stop(self) -> None:
        self._ctl("-m", "fast", "-w", "-t", "60", "stop")
        self.running = False

    def destroy(self) -> None:
        if self.running:
            with contextlib.suppress(subprocess.CalledProcessError):
                self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateMariaDB:
    """``mariadb-install-db`` + ``mariadbd`` with its own datadir, socket and port."""

    vendor = "mysql"
    user = "mysql"

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = _owned_dir("headgate-chaos-maria-", self.user)
        self.data = self.dir / "data"
        self.url = f"mysql://root@127.0.0.1:{self.port}/{DATABASE}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def create(self) -> None:
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.data}",
                f"--user={self.user}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.start()
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", port=self.port, user="root")
        try:
            conn.cursor().execute(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4")
        finally:
            conn.close()

    def start(self) -> None:
        with (self.dir / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [MARIADBD, "--no-defaults", f"--datadir={self.data}"]
                + [f"--socket={self.dir / 'mysqld.sock'}", f"--port={self.port}"]
                + ["--bind-address=127.0.0.1", f"--pid-file={self.dir / 'mysqld.pid'}"]
                + ["--skip-log-bin", "--innodb-flush-log-at-trx-commit=2"]
                + ["--max-connections=300", "--skip-name-resolve"]
                + ([f"--user={self.user}"] if os.geteuid() == 0 else []),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_port(self.port, 60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None

    def destroy(self) -> None:
        if self.running:
            try:
                self.stop()
            except subprocess.TimeoutExpired:
                assert self.proc is not None
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


Server = PrivatePostgres | PrivateMariaDB


def make_server(database: str) -> Server:
    if database == "postgres":
        return PrivatePostgres()
    if database == "mariadb":
        return PrivateMariaDB()
    raise ValueError(f"database must be postgres or mariadb, not {database!r}")


def restart(server: Server) -> float:
    """Stop the server and start it again; return how long it was down, in seconds."""
    began = time.monotonic()
    server.stop()
    server.start()
    return time.monotonic() - began

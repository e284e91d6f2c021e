"""The integration tests against PostgreSQL through PgBouncer in transaction pooling mode.

What production deployments behind a pooler get, started for real, in order:

1. a private PgBouncer (Debian's ``pgbouncer``) in a temporary directory, ``pool_mode =
   transaction``, listening on a free loopback port and forwarding every database to the
   PostgreSQL server of ``HEADGATE_TEST_POSTGRES`` (run as the ``postgres`` user when this
   process is root, which PgBouncer refuses to be);
2. the test databases (``test_<name>_gw0`` …) created directly on PostgreSQL: through the
   pooler a ``DROP DATABASE`` would find its own pooled sessions in the way, so the tests
   reuse them (``--reuse-db``, migrated through the pooler) and this script drops them;
3. ``pytest tests/integration`` with ``DATABASE_URL`` through PgBouncer
   (``?prepare_threshold=none&disable_server_side_cursors=true``, as docs/how-to/deployment.md
   says) and ``HEADGATE_TEST_POOLER_BYPASS`` naming the server, so worker processes LISTEN
   directly (``HEADGATE["LISTEN_USING"]``) and ``tests/integration/test_pooler.py`` runs;
4. PgBouncer stopped by its PID, the databases dropped, the directory removed.

``make test-pgbouncer`` runs it; so does CI. It exits with pytest's status. Arguments, if
any, go to pytest instead of ``tests/integration`` (``run_pgbouncer.py -rs tests/…``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
WORKERS = int(os.environ.get("TEST_WORKERS", "5"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_pgbouncer(tmp: Path, server_host: str, server_port: int) -> tuple[subprocess.Popen, int]:
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        raise SystemExit("needs Debian's pgbouncer (apt-get install pgbouncer)")
    port = free_port()
    (tmp / "users.txt").write_text('"postgres" ""\n')
    (tmp / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server_host} port={server_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp / 'users.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 1000\ndefault_pool_size = 40\n"
        # Django sends these at connect; PgBouncer must let them through.
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {tmp / 'pgbouncer.log'}\n"
    )
    argv = [binary, str(tmp / "pgbouncer.ini")]
    if os.geteuid() == 0:
        argv[1:1] = ["-u", "postgres"]
        shutil.chown(tmp, pwd.getpwnam("postgres").pw_uid)
        for child in tmp.iterdir():
            shutil.chown(child, pwd.getpwnam("postgres").pw_uid)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (tmp / "pgbouncer.log").read_text(errors="replace")
            raise SystemExit(f"pgbouncer exited {proc.returncode}:\n{log[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("pgbouncer did not come up within 30 s")


def test_databases(base: str) -> list[str]:
    return [f"test_{base}_gw{n}" for n in range(WORKERS)] if WORKERS > 1 else [f"test_{base}"]


def admin(server: str, statements: list[str]) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def main() -> int:
    url = os.environ.get("HEADGATE_TEST_POSTGRES")
    if not url:
        print("(PgBouncer leg skipped: set HEADGATE_TEST_POSTGRES to a database URL)")
        return 0
    parts = urlsplit(url)
    base = f"{parts.path.lstrip('/') or 'headgate'}_pgb"
    server = f"{parts.scheme}://{parts.netloc}"
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    names = test_databases(base)
    tmp = Path(tempfile.mkdtemp(prefix="headgate-pgbouncer-"))
    os.chmod(tmp, 0o755)
    bouncer, bouncer_port = start_pgbouncer(tmp, host, port)
    try:
        admin(server, [f"DROP DATABASE IF EXISTS {n} WITH (FORCE)" for n in names])
        admin(server, [f"CREATE DATABASE {n}" for n in names])
        user = parts.netloc.rpartition("@")[0]
        pooled = (
            f"{parts.scheme}://{user + '@' if user else ''}127.0.0.1:{bouncer_port}/{base}"
            "?prepare_threshold=none&disable_server_side_cursors=true"
        )
        env = {
            **os.environ,
            "DATABASE_URL": pooled,
            "HEADGATE_TEST_POOLER_BYPASS": f"{host}:{port}",
        }
        print(f"== integration tests on PostgreSQL through PgBouncer (127.0.0.1:{bouncer_port})")
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["-n", str(WORKERS)] if WORKERS > 1 else []
        argv += ["--reuse-db", "-m", "not chaos", *(sys.argv[1:] or ["tests/integration"])]
        return subprocess.run(argv, env=env, cwd=ROOT).returncode
    finally:
        bouncer.send_signal(signal.SIGINT)  # PgBouncer's "safe shutdown"
        try:
            bouncer.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bouncer.kill()
            bouncer.wait(timeout=10)
        admin(server, [f"DROP DATABASE IF EXISTS {n} WITH (FORCE)" for n in names])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

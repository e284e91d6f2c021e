"""A bounded schemathesis run against a live server of the sample project.

The in-process fuzz test (``tests/api/test_fuzz.py``) drives the WSGI handler inside a
test transaction; this one goes over real HTTP to a real server, as an outside client
does, with every schemathesis check (negative and positive data, missing headers,
ignored auth, use after free …) and the stateful phase over the links schemathesis
infers. What it does, in order:

1. a temporary SQLite database: ``migrate``, the demo data (``manage.py demo``, which
   also creates the ``operator`` user), this run's own seed (``seed.py``: failed,
   retry-ready workflows, which the demo cannot have without a worker) and a token for
   that user (``drf_create_token``);
2. Daphne on a loopback socket this process binds to port 0 and hands over (``--fd``),
   so the port is free by construction, not by a guess;
3. ``schemathesis run`` with a fixed seed and a per-operation case budget of 15 (the
   coverage phase, a fixed cost, is most of the run; the budget trims the fuzzing
   phase, and 20 added under 10 % more cases for CI's tight time), and the hooks of ``hooks.py`` (a fresh ``Idempotency-Key`` per distinct
   request, the project's registered names as examples, and positive cases' ids paired
   with what they need: a workflow with its signals, a retry with a failed workflow, a
   job action with a user's job, a schedule with a registered target);
4. the server is stopped by its PID, the temporary directory removed.

It prints the number of test cases and exits non-zero on any failure, on any server
error and on any traceback the server logged. ``make schemathesis`` runs it; so does CI.
Override the budget with ``SCHEMATHESIS_MAX_EXAMPLES`` and the seed with
``SCHEMATHESIS_SEED`` to explore further by hand; ``SCHEMATHESIS_REPORT=path`` keeps the
run's event stream (NDJSON) for reading afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = Path(__file__).with_name("schemathesis.toml")
HOOKS = Path(__file__).with_name("hooks.py")
SEED_SCRIPT = Path(__file__).with_name("seed.py")
SEED = os.environ.get("SCHEMATHESIS_SEED", "20251")
MAX_EXAMPLES = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "15")
#: A safety net only: the case budget ends the run (schemathesis's own ``--max-time``
#: would instead repeat fuzzing until the time is spent).
TIMEOUT_S = 900


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DEMO_OPERATOR_PORT"}
    env.update(
        DJANGO_SETTINGS_MODULE="sampleproject.settings",
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        # Production-like: no Basic authentication, no debug pages.
        DJANGO_DEBUG="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def _python(env: dict[str, str], script: Path, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"{script.name} {' '.join(args)} failed ({result.returncode})")
    return result.stdout


def _manage(env: dict[str, str], *args: str) -> str:
    return _python(env, ROOT / "manage.py", *args)


def _prepare(env: dict[str, str]) -> str:
    """The database, the demo data, this run's own seed and the operator's token."""
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "demo")
    _python(env, SEED_SCRIPT)
    out = _manage(env, "drf_create_token", "operator")
    match = re.search(r"Generated token (\w+)", out)
    if match is None:
        raise SystemExit(f"no token in drf_create_token's output: {out!r}")
    return match.group(1)


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _start_server(env: dict[str, str], sock: socket.socket, log: Path) -> subprocess.Popen[bytes]:
    command = [
        str(BIN / "daphne"),
        "--fd",
        str(sock.fileno()),
        "-v",
        "1",
        "sampleproject.asgi:application",
    ]
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(sock.fileno(),),
            start_new_session=True,
        )


def _wait_up(base: str, token: str, server: subprocess.Popen[bytes]) -> None:
    request = urllib.request.Request(
        f"{base}/api/v1/healthz", headers={"Authorization": f"Token {token}"}
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode}) before answering")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:  # refused, reset or timed out while it starts
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not answer /api/v1/healthz within 60 s")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _schemathesis(base: str, token: str, report: Path, workdir: Path, env: dict[str, str]) -> int:
    command = [
        str(BIN / "schemathesis"),
        "--config-file",
        str(CONFIG),
        "run",
        f"{base}/api/v1/schema/",
        "--header",
        f"Authorization: Token {token}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--seed",
        SEED,
        "--max-examples",
        MAX_EXAMPLES,
        "--generation-database",
        "none",
        # One worker: two race in hypothesis's lambda-source parsing on Python 3.11
        # ("AST constructor recursion depth mismatch"), and the server has one core.
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-color",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
    ]
    try:
        # The hooks read the sample project's registries: its settings, importable.
        hooks_env = {**env, "SCHEMATHESIS_HOOKS": str(HOOKS), "PYTHONPATH": str(ROOT)}
        return subprocess.run(
            command, cwd=workdir, env=hooks_env, check=False, timeout=TIMEOUT_S
        ).returncode
    except subprocess.TimeoutExpired:
        print(f"schemathesis did not finish within {TIMEOUT_S} s", file=sys.stderr)
        return 1


def _case_count(report: Path) -> int:
    """Test cases schemathesis ran, read from its event stream (its summary counts
    operations and scenarios; this counts requests' cases)."""
    count = 0
    for line in report.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        for name, body in event.items():
            if name == "ScenarioFinished":
                count += len(body.get("recorder", {}).get("cases", {}))
    return count


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="headgate-schemathesis-"))
    env = _env(tmp)
    server = None
    try:
        token = _prepare(env)
        sock = _listen()
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        log = tmp / "server.log"
        server = _start_server(env, sock, log)
        sock.close()  # the server holds its own copy
        _wait_up(base, token, server)
        report = Path(os.environ.get("SCHEMATHESIS_REPORT", tmp / "events.ndjson"))
        code = _schemathesis(base, token, report, tmp, env)
        print(f"schemathesis: {_case_count(report)} test cases, exit code {code}")
        logged = log.read_text(encoding="utf-8", errors="replace")
        if os.environ.get("SCHEMATHESIS_SERVER_LOG"):
            Path(os.environ["SCHEMATHESIS_SERVER_LOG"]).write_text(logged, encoding="utf-8")
        if "Traceback" in logged:
            print("the server logged a traceback:\n" + logged[-8000:], file=sys.stderr)
            code = code or 1
        return code
    finally:
        if server is not None:
            _stop(server)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

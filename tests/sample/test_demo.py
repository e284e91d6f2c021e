"""``make demo`` end to end: it migrates, seeds, then serves the console with live workers.

The test runs the real ``make demo`` in the background (on its own SQLite file and ports),
waits for the server, logs in as the printed admin user and requests the console pages,
waits until the workers have finished one of the seeded workflows, then runs the workflow
guide's curl commands, as docs/api.md shows them, against the demo's operator port.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (ROOT / ".venv" / ".installed").exists(),
        reason="needs the virtualenv `make test` creates (make demo would build one)",
    ),
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL", "sqlite").startswith("sqlite"),
        reason="make demo runs on its own SQLite file whatever the suite's database; "
        "the SQLite leg runs it once",
    ),
]


class Browser:
    """A cookie-keeping client, enough for the admin's session login with CSRF."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def login(self, username: str, password: str) -> None:
        _, page = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, "no CSRF token on the login page"
        form = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token.group(1), "username": username, "password": password}
        ).encode()
        request = urllib.request.Request(
            self.base + "/admin/login/?next=/admin/", data=form, headers={"Referer": self.base}
        )
        with self.opener.open(request, timeout=10) as response:
            assert response.status == 200


GUIDE_OPERATOR_ADDR = "127.0.0.1:8080"


def guide_commands() -> list[str]:
    """The curl commands of docs/api.md's Examples block, in order, exactly as written."""
    text = (ROOT / "docs" / "api.md").read_text()
    block = text.split("## Examples", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    chunks = [c for c in block.split("\n\n") if c.strip()]
    commands = [c for c in chunks if c.startswith("curl")]
    assert f"export HEADGATE_URL=http://{GUIDE_OPERATOR_ADDR}" in block
    return [c.split("\n# ", 1)[0] for c in commands]


def run_curl(command: str, operator_addr: str) -> object:
    """One guide command through bash and curl, on the test's operator port instead of 8080."""
    done = subprocess.run(
        ["bash", "-c", command.replace(GUIDE_OPERATOR_ADDR, operator_addr)],
        env={**os.environ, "HEADGATE_URL": f"http://{operator_addr}"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


def wait_for(what: str, probe, timeout: float = 90):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def test_make_demo_serves_the_console_with_live_workflows(tmp_path: Path) -> None:
    port = free_port()
    operator_addr = f"127.0.0.1:{free_port()}"
    env = _demo_env(tmp_path, f"127.0.0.1:{port}", operator_addr)
    log = (tmp_path / "demo.log").open("wb")
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "demo"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    browser = Browser(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if browser.get("/admin/login/")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("make demo did not serve: " + (tmp_path / "demo.log").read_text())
        assert "admin / password: headgate-demo" in (tmp_path / "demo.log").read_text()
        browser.login("admin", "headgate-demo")
        for page in ("/admin/", "/admin/headgate_django/job/queues/"):
            status, _ = browser.get(page)
            assert status == 200, page
        status, listing = browser.get("/admin/headgate_django/job/workflows/")
        assert status == 200 and "onboarding:42" in listing and "checkout:42" in listing
        deadline = time.monotonic() + 90
        page = ""
        while time.monotonic() < deadline:
            status, page = browser.get("/admin/headgate_django/job/workflows/approval:42/graph/")
            if status == 200 and "completed" in page:
                break
            time.sleep(1)
        assert status == 200 and "approval:42" in page
        assert "completed" in page, "the demo's workers did not finish approval:42"
        _guide_examples(port, operator_addr)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        _kill_demo_processes(env["DATABASE_URL"])


def _guide_examples(port: int, operator_addr: str) -> None:
    signal_cmd, history_cmd, retry_cmd = guide_commands()
    operator = Browser(f"http://{operator_addr}")

    def workflow() -> dict:
        status, body = operator.get("/api/v1/workflows/onboarding:42")
        assert status == 200, body
        return json.loads(body)

    # The operator port is the sample project's authentication; the API itself still
    # refuses a caller without credentials on the ordinary port.
    assert Browser(f"http://127.0.0.1:{port}").get("/api/v1/jobs")[0] == 401
    wait_for(
        "onboarding:42 to wait for its signal",
        lambda: workflow()["nodes"][0]["state"] == "completed",
    )

    receipt = run_curl(signal_cmd, operator_addr)
    assert isinstance(receipt, dict)
    assert (receipt["matched"], receipt["promoted"], receipt["inserted"]) == (1, 1, True)
    assert receipt["emission"]["payload"] == {"approved": True, "reviewer": "Ada"}
    history = run_curl(history_cmd, operator_addr)
    assert isinstance(history, dict)
    assert history["signals"][0]["payload"] == {"approved": True, "reviewer": "Ada"}
    assert history["next_cursor"] is None

    failed = wait_for("onboarding:42 to fail", lambda: (w := workflow())["failed"] and w)
    assert failed["revision"] == 1
    assert {n["name"]: n["state"] for n in failed["nodes"]}["send-welcome"] == "undecodable"

    assert run_curl(retry_cmd, operator_addr) == {
        "workflow_id": "onboarding:42",
        "revision": 2,
        "generation": 2,
        "receipt_id": "onboarding:42:retry:2",
    }
    wait_for(
        "the repaired onboarding:42 to complete",
        lambda: workflow()["coordinator_state"] == "completed",
    )
    status, body = operator.get("/api/v1/jobs/onboarding:42:send-welcome/result")
    assert status == 200 and json.loads(body)["result"] == {"sent_to": "new@example.com"}


def _demo_env(tmp_path: Path, addr: str, operator_addr: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "DEMO_ADDR": addr,
        "DEMO_OPERATOR_ADDR": operator_addr,
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def _jobs_by_state(tmp_path: Path) -> dict[str, int]:
    import sqlite3

    db = sqlite3.connect(tmp_path / "demo.sqlite3")
    try:
        return dict(db.execute("SELECT state, COUNT(*) FROM headgate_job GROUP BY state"))
    finally:
        db.close()


def _kill_demo_processes(database_url: str) -> None:
    """SIGKILL whatever a failed run left behind: the demo's servers and worker run in
    sessions of their own, out of reach of the signal that stops ``make``. They are found by
    the test's own database URL in their environment."""
    marker = f"DATABASE_URL={database_url}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)


def test_make_demo_on_a_busy_port_fails_before_it_touches_the_demo_data(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        addr = f"127.0.0.1:{busy.getsockname()[1]}"
        done = subprocess.run(
            ["make", "--no-print-directory", "demo"],
            env=_demo_env(tmp_path, addr, f"127.0.0.1:{free_port()}"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "CommandError" in line]
    suggested = re.fullmatch(
        rf"CommandError: {re.escape(addr)} is in use: stop what listens there, or choose a "
        r"free port: make demo DEMO_ADDR=(127\.0\.0\.1:\d+) \(rundemo --addr \1\)",
        "\n".join(errors),
    )
    assert suggested and suggested.group(1) != addr, done.stderr
    assert _jobs_by_state(tmp_path) == {}  # migrated, and no demo job created or run


def test_one_ctrl_c_on_make_demo_drains_and_exits_zero(tmp_path: Path) -> None:
    import pty
    import threading

    port = free_port()
    env = _demo_env(tmp_path, f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}")
    pid, terminal = pty.fork()
    if pid == 0:  # the child: `make demo` in the foreground of a fresh terminal
        # As a shell typed into would start it: signals neither blocked nor ignored, whatever
        # this test process inherited or set (both survive fork and exec).
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGTTOU):
            signal.signal(signum, signal.SIG_DFL)
        os.chdir(ROOT)
        os.execvpe("make", ["make", "--no-print-directory", "demo"], env)
    output = bytearray()

    def read() -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(terminal, 65536):
                output.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for("the demo's worker to start", lambda: b" serving " in output, timeout=180)
        wait_for("a demo job to run", lambda: _jobs_by_state(tmp_path).get("completed"))
        os.write(terminal, b"\x03")  # Ctrl-C, as typed: the terminal sends the SIGINT
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(
                "make demo did not exit after one Ctrl-C:\n" + output.decode(errors="replace")
            )
    finally:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        _kill_demo_processes(env["DATABASE_URL"])
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "received SIGTERM: draining" in text
    assert "exiting without draining" not in text and "Interrupt" not in text
    assert _jobs_by_state(tmp_path).get("running", 0) == 0, text

"""What ``make demo`` runs, end to end: migrate, seed, then workers and the ASGI server.

The sample project runs in subprocesses on its own SQLite file; the test waits for the
server, reads the seeded workflows through the API (HTTP Basic, which the sample project
enables in DEBUG) and waits until the workers have finished one of them.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AUTH = "Basic " + base64.b64encode(b"admin:headgate-demo").decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, auth: bool = True) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": AUTH} if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.slow
def test_demo_seeds_serves_and_runs(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sampleproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "PYTHONPATH": str(ROOT),
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--no-input", "-v0"], env=env, check=True, cwd=ROOT)
    seeded = subprocess.run(
        [*manage, "demo"], env=env, check=True, cwd=ROOT, capture_output=True, text=True
    )
    assert "admin / password: headgate-demo" in seeded.stdout
    port = _free_port()
    log = (tmp_path / "demo.log").open("wb")
    proc = subprocess.Popen(
        [*manage, "rundemo", "--addr", f"127.0.0.1:{port}"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _get(f"{base}/admin/login/", auth=False)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the demo server did not come up: " + (tmp_path / "demo.log").read_text())
        status, body = _get(f"{base}/api/v1/workflows?limit=50")
        assert status == 200, body
        ids = {item["workflow_id"] for item in json.loads(body)["workflows"]}
        assert {"onboarding:42", "checkout:42", "approval:42"} <= ids
        deadline = time.monotonic() + 60
        state = None
        while time.monotonic() < deadline and state != "completed":
            status, body = _get(f"{base}/api/v1/workflows/approval%3A42")
            state = json.loads(body).get("coordinator_state") if status == 200 else None
            time.sleep(0.5)
        assert state == "completed", "the demo's workers did not finish approval:42"
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()

"""``make demo`` end to end: it migrates, seeds, then serves the console with live workers.

The test runs the real ``make demo`` in the background (on its own SQLite file and port),
waits for the server, logs in as the printed admin user and requests the console pages,
then waits until the workers have finished one of the seeded workflows.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (ROOT / ".venv" / ".installed").exists(),
        reason="needs the virtualenv `make test` creates (make demo would build one)",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def test_make_demo_serves_the_console_with_live_workflows(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "DEMO_ADDR": f"127.0.0.1:{port}",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
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
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()

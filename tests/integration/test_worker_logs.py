"""A worker in a project made by ``startproject`` with only the README's install steps
speaks on stderr: start line, status lines, attempts at ``-v 3``, stop summary; ``-v 0``
leaves only errors. (The test suite's own settings configure logging, so this runs a
project of its own.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    # The project is SQLite on every leg: run it once, on the SQLite leg.
    pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="runs on the SQLite leg"),
]

SETTINGS = """
INSTALLED_APPS += ["rest_framework", "django_filters", "channels", "headgate_django", "shop"]
from datetime import timedelta
HEADGATE = {"STATUS_INTERVAL": timedelta(milliseconds=200)}
"""
TASKS = """
from headgate_django import task

@task(kind="shop.hello")
def hello(ctx, name):
    return f"hello {name}"
"""
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR|DEBUG) +\[\d+\] ")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh")
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "freshsite", str(root)],
        env=env(),
        check=True,
    )
    manage(root, "startapp", "shop")
    (root / "shop" / "tasks.py").write_text(TASKS)
    with (root / "freshsite" / "settings.py").open("a") as settings:
        settings.write(SETTINGS)
    manage(root, "migrate", "-v", "0")
    manage(root, "shell", "-c", "from shop.tasks import hello; hello.enqueue(name='ada')")
    return root


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HEADGATE_"))}
    return {**clean, "PYTHONUNBUFFERED": "1"}


def manage(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_the_worker_speaks_with_time_and_level_and_v3_shows_each_attempt(project):
    out = manage(project, "runworkers", "--burst", "-v", "3")
    # The system checks' report comes first (a fresh project's SQLite gets headgate.W001).
    lines = [line for line in out.stderr.splitlines() if "headgate_django." in line]
    assert lines and all(LINE.match(line) for line in lines), out.stderr
    assert "headgate_django.worker: runworkers: 1 process × 10 handler threads" in lines[0]
    start = next(line for line in lines if " serving " in line)
    assert re.search(
        r"INFO +\[\d+\] headgate_django\.worker: worker \S+ serving every queue with "
        r"concurrency 10; sqlite database \S+db\.sqlite3 \(default\), \d+ kinds registered, "
        r"duties on$",
        start,
    ), start
    assert any(
        re.search(
            r"headgate_django\.attempts: job \S+ \(shop\.hello\) attempt 1 succeeded in ", line
        )
        for line in lines
    ), out.stderr
    assert "stopped: claimed=1 completed=1" in lines[-1]


def test_status_lines_come_every_interval_and_a_signal_drains(project):
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runworkers"],
        cwd=project,
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    # Read until the second status line rather than sleep a fixed time: a loaded machine
    # can take seconds to start the process, and the test is about the lines, not the clock.
    seen: list[str] = []
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if sum("headgate_django.worker: status claimed=" in s for s in seen) >= 2:
            break
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=60)
    stderr = "".join(seen) + rest
    assert proc.returncode == 0, stderr
    assert stderr.count("headgate_django.worker: status claimed=") >= 2, stderr
    assert "received SIGTERM: draining (running jobs get up to 25 s" in stderr
    assert "send it again to exit at once" in stderr
    assert " stopped: " in stderr


def test_v0_leaves_only_errors(project):
    enqueue = "from headgate_django import Envelope, enqueue; enqueue(Envelope(kind='shop.gone'))"
    manage(project, "shell", "-c", enqueue)  # a burst's end warns of kinds it cannot run
    loud = manage(project, "runworkers", "--burst")
    assert re.search(r"WARNING +\[\d+\] headgate_django\.worker: 1 available job", loud.stderr)
    quiet = manage(project, "runworkers", "--burst", "-v", "0")
    assert "available job" not in quiet.stderr and "headgate_django." not in quiet.stderr


def test_every_option_of_runworkers_says_its_default():
    from headgate_django.management.commands.runworkers import Command

    parser = Command().create_parser("manage.py", "runworkers")
    ours = [
        a
        for a in parser._actions
        if a.dest
        in {
            "queues",
            "concurrency",
            "processes",
            "burst",
            "lease_ttl",
            "no_duties",
            "worker_id",
            "metrics_port",
            "durable_mode",
        }
    ]
    assert len(ours) == 9
    for action in ours:
        assert action.help and "default" in action.help.lower(), action.dest

"""Run inside ``manage.py shell`` of the tutorial's project by ``test_tutorial_project.py``.

Follows ``docs/tutorial.md`` from the first shell session on: each ``pycon`` block is
checked by doctest in one namespace, as a reader's shell session would carry on, and each
``python manage.py`` line of an ``sh`` block runs as a real command in the project, the
long-running ones bounded (``runworkers --burst``; ``runserver`` until its login page
answers). Raises ``AssertionError`` on the first difference.
"""

from __future__ import annotations

import doctest
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.environ["TUTORIAL_REPO"])
from tests.docs.markdown import blocks

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def manage(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,  # type: ignore[arg-type]
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_once() -> None:
    """``runserver``: started, asked for the admin's login page, stopped."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/") as page:
                    assert page.status == 200
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_command(words: list[str], log: list[str]) -> None:
    name, args = words[2], words[3:]
    if name == "runworkers":
        log.append(manage("runworkers", *args, "--burst").stdout)
    elif name == "runserver":
        serve_once()
    elif name == "createsuperuser":
        env = {**os.environ, "DJANGO_SUPERUSER_PASSWORD": "tutorial-password"}
        manage(
            "createsuperuser",
            "--noinput",
            "--username",
            "admin",
            "--email",
            "admin@example.com",
            env=env,
        )
    elif name in ("migrate", "startapp"):
        pass  # done by the test before this session began
    else:
        manage(name, *args)


def main() -> None:
    namespace: dict[str, object] = {"__name__": "tutorial_shell"}
    started = False
    worker_output: list[str] = []
    for block in blocks(Path(os.environ["TUTORIAL_PAGE"])):
        if block.lang == "pycon":
            started = True
            test = doctest.DocTestParser().get_doctest(
                block.code, namespace, block.where, block.where, block.line
            )
            report: list[str] = []
            runner = doctest.DocTestRunner(optionflags=FLAGS)
            runner.run(test, out=report.append, clear_globs=False)
            namespace.update(test.globs)
            assert runner.failures == 0, f"{block.where}:\n" + "".join(report)
        elif block.lang == "sh" and started:
            for line in block.code.splitlines():
                words = shlex.split(line, comments=True)
                if words[:2] == ["python", "manage.py"]:
                    run_command(words, worker_output)
    assert started, "the tutorial has no shell session"
    assert "Subject: Welcome!" in worker_output[0], worker_output


main()
print("tutorial followed")

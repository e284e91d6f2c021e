"""``docs/tutorial.md`` followed in a real project, as a reader would.

``startproject`` and ``startapp`` as the page says, each file block written where it says
(the settings block added at the end of the generated settings), ``migrate``, then the
rest of the page in one ``manage.py shell`` (``tutorial_runner.py``): shell sessions
checked by doctest, ``manage.py`` commands run for real. The only change to the reader's
project: a longer ``COORDINATOR_POLL``, so that no coordinator wakes by the clock while the
sessions run and the printed outcomes stay exactly as on the page.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.markdown import DOCS, blocks

pytestmark = [
    pytest.mark.slow,
    # The project is SQLite on every leg: run it once, on the SQLite leg.
    pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="runs on the SQLite leg"),
]

REPO = DOCS.parent
PAGE = DOCS / "tutorial.md"
RUNNER = Path(__file__).with_name("tutorial_runner.py")


def _env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HEADGATE_"))}
    return {**clean, "TUTORIAL_REPO": str(REPO), "TUTORIAL_PAGE": str(PAGE)}


def _run(words: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    if words[0] == "python":
        words = [sys.executable, *words[1:]]
    elif words[0] == "django-admin":
        words = [sys.executable, "-m", "django", *words[1:]]
    done = subprocess.run(words, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_tutorial_runs_in_a_fresh_project(tmp_path):
    first_session = False
    for block in blocks(PAGE):
        if block.lang == "pycon":
            first_session = True
            break
        if block.lang == "python" and block.module_name:
            target = tmp_path / (block.module_name.replace(".", "/") + ".py")
            if block.module_name == "mysite.settings":
                with target.open("a", encoding="utf-8") as settings:
                    settings.write("\n" + block.code)
                    settings.write(
                        '\nHEADGATE["COORDINATOR_POLL"] = timedelta(minutes=5)  # the test\'s\n'
                    )
            else:
                target.write_text(block.code, encoding="utf-8")
        elif block.lang == "sh":
            for line in block.code.splitlines():
                words = shlex.split(line, comments=True)
                if not words or words[:4] == ["python", "-m", "pip", "install"]:
                    continue  # this test runs where headgate-django is installed
                _run(words, tmp_path)
    assert first_session and (tmp_path / "manage.py").exists()
    # The files the page shows after its first session (workflows.py, urls.py, asgi.py).
    for block in blocks(PAGE):
        if block.lang == "python" and block.module_name and block.module_name != "mysite.settings":
            target = tmp_path / (block.module_name.replace(".", "/") + ".py")
            target.write_text(block.code, encoding="utf-8")
    code = f"import runpy; runpy.run_path({str(RUNNER)!r}, run_name='__main__')"
    done = _run(["python", "manage.py", "shell", "-c", code], tmp_path)
    assert "tutorial followed" in done.stdout

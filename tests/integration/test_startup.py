"""What a worker process imports while it sets up: what serving jobs needs, and no more.

Each ``runworkers`` process pays for every module Django's set-up imports, so libraries
that only some paths use are imported on first use: celpy when the first CEL condition
is compiled, Daphne (and Twisted) only by the sample project's ``runserver``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

SET_UP_A_WORKER = """
import sys
import django
django.setup()
from headgate_django.management.commands import runworkers
from headgate_django.worker import runner
print(" ".join(sorted(name for name in sys.argv[1:] if name in sys.modules)))
"""


def imported(env: dict[str, str], settings: str, *modules: str) -> list[str]:
    """Which of ``modules`` a fresh process has imported once it is ready to run a worker."""
    result = subprocess.run(
        [sys.executable, "-c", SET_UP_A_WORKER, *modules],
        env={**env, "DJANGO_SETTINGS_MODULE": settings},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


@pytest.mark.parametrize("settings", ["tests.settings", "sampleproject.settings"])
def test_worker_set_up_leaves_celpy_to_the_first_condition(worker_env, settings):
    assert imported(worker_env, settings, "celpy", "lark") == []


def test_sample_project_worker_set_up_does_not_import_daphne(worker_env):
    assert imported(worker_env, "sampleproject.settings", "daphne", "twisted") == []


def test_compiling_a_condition_imports_celpy(worker_env):
    # The other half of the laziness: the first compile loads celpy and works.
    code = (
        "import sys\n"
        "from headgate_django.kernel import cel\n"
        "assert 'celpy' not in sys.modules\n"
        "assert cel.evaluate(cel.compile('completed.a'), 1, 1, {}, {'a': True})\n"
        "assert 'celpy' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], env=worker_env, cwd=ROOT, check=True)

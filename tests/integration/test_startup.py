"""What a worker process imports while it sets up: what serving jobs needs, and no more.

Each ``runworkers`` process pays for every module Django's set-up imports, so libraries
that only some paths use are imported on first use: celpy when the first CEL condition
is compiled, Daphne (and Twisted) only by the sample project's ``runserver``, Django's
Tasks framework and headgate's backend for it only when ``TASKS`` names the backend, the
workflow and durable runtimes by the first job (or duty) that runs them, though their
handlers are registered at set-up, and the admin pages' store readers by the first page.
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


def run_python(env: dict[str, str], settings: str, code: str, *args: str) -> str:
    """What ``code`` prints, run by a fresh interpreter with ``settings``."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**env, "DJANGO_SETTINGS_MODULE": settings},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def imported(env: dict[str, str], settings: str, *modules: str) -> list[str]:
    """Which of ``modules`` a fresh process has imported once it is ready to run a worker."""
    return run_python(env, settings, SET_UP_A_WORKER, *modules).split()


@pytest.mark.parametrize("settings", ["tests.settings", "sampleproject.settings"])
def test_worker_set_up_leaves_celpy_to_the_first_condition(worker_env, settings):
    assert imported(worker_env, settings, "celpy", "lark") == []


#: A new project's settings: startproject's apps, the admin included, plus the README's
#: install; none of its own modules builds a workflow (the sample and test projects do).
NEW_PROJECT = "benchmarks.defaults_settings"
#: The workflow API and the coordinator's machinery: loaded by their first use.
WORKFLOW_RUNTIME = (
    "headgate_django.workflows.builder",
    "headgate_django.workflows.bundle",
    "headgate_django.workflows.cancel",
    "headgate_django.workflows.coordinator",
    "headgate_django.workflows.grafts",
    "headgate_django.workflows.inspect",
    "headgate_django.workflows.retry",
    "headgate_django.workflows.signals",
    "headgate_django.kernel.graph",
    "headgate_django.kernel.workflow",
    "headgate_django.store.workflows",
)
#: The durable runtime, loaded by the first durable job or durable duty a worker runs.
DURABLE_RUNTIME = (
    "headgate_django.durable.registry",
    "headgate_django.durable.workflow_task",
    "headgate_django.durable.operations",
    "headgate_django.kernel.replay",
    "headgate_django.kernel.replay_events",
    "headgate_django.store.durable",
    "headgate_django.store.durable_jobs",
)
#: What only the admin's pages read, loaded by the first page that does.
ADMIN_READERS = tuple(
    f"headgate_django.store.{name}" for name in ("console", "index_hints", "stats")
)


def test_worker_set_up_imports_the_admin_without_the_readers_of_its_pages(worker_env):
    loaded = imported(worker_env, NEW_PROJECT, "headgate_django.admin", *ADMIN_READERS)
    assert loaded == ["headgate_django.admin"]


def test_worker_set_up_registers_the_internal_handlers_without_what_they_run(worker_env):
    assert imported(worker_env, NEW_PROJECT, *WORKFLOW_RUNTIME, *DURABLE_RUNTIME) == []
    code = (
        "import django; django.setup()\n"
        "from headgate_django.registry import registered_kinds\n"
        "print(' '.join(sorted(registered_kinds())))\n"
    )
    kinds = run_python(worker_env, NEW_PROJECT, code).split()
    assert {"headgate:workflow", "headgate:signal", "headgate:graft"} <= set(kinds)
    assert {"headgate:durable-task", "headgate:durable-op"} <= set(kinds)


def test_the_workflow_and_durable_apis_load_on_first_use(worker_env):
    code = (
        "import django; django.setup()\n"
        "import sys, headgate_django.workflows as w\n"
        "from headgate_django import durable\n"
        "assert 'headgate_django.workflows.builder' not in sys.modules\n"
        "assert 'headgate_django.durable.registry' not in sys.modules\n"
        "from headgate_django.workflows import Workflow\n"
        "from headgate_django.workflows.builder import Workflow as defined\n"
        "assert Workflow is defined and w.Workflow is defined\n"
        "from headgate_django.durable.registry import workflow\n"
        "assert durable.workflow is workflow\n"
        "for module in (w, durable):\n"
        "    try:\n        module.Missing\n    except AttributeError as exc:\n        print(exc)\n"
    )
    printed = run_python(worker_env, NEW_PROJECT, code)
    assert printed.count("has no attribute 'Missing'") == 2


def test_sample_project_worker_set_up_does_not_import_daphne(worker_env):
    assert imported(worker_env, "sampleproject.settings", "daphne", "twisted") == []


def test_a_project_without_django_tasks_does_not_import_the_backend(worker_env):
    # The sample project does not configure TASKS; Django still imports every app's
    # ``tasks`` module, headgate_django.tasks included.
    loaded = imported(
        worker_env,
        "sampleproject.settings",
        "headgate_django.tasks",
        "django_tasks",
        "headgate_django.tasks_backend",
    )
    assert loaded == ["headgate_django.tasks"]


def test_the_backend_loads_on_first_use(worker_env):
    code = (
        "import django; django.setup()\n"
        "import sys, headgate_django.tasks as t\n"
        "assert 'headgate_django.tasks_backend' not in sys.modules\n"
        "backend = t.HeadgateBackend\n"
        "assert 'headgate_django.tasks_backend' in sys.modules\n"
        "from headgate_django.tasks_backend import HeadgateBackend\n"
        "assert backend is HeadgateBackend\n"
        "try:\n    t.Missing\nexcept AttributeError as exc:\n    print(exc)\n"
    )
    assert "has no attribute 'Missing'" in run_python(worker_env, "sampleproject.settings", code)


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

"""Every code block of ``docs/tutorial.md`` runs, in order, so the tutorial cannot drift.

- A ``python`` block whose first line is ``# package/module.py`` *is* that module: it is
  executed as ``package.module`` and put in ``sys.modules`` (for this test only), so later
  blocks import it the way a reader's project would.
- Other ``python`` blocks run in the namespace shared by the shell sessions.
- ``pycon`` blocks are ``manage.py shell`` sessions, checked by doctest.
- ``sh`` blocks are not run, but every ``python manage.py …`` line in them is parsed by
  the real command's argument parser, so a renamed command or option fails here. Where
  one starts ``runworkers``, the due jobs are run in-process, as that worker would.
- The settings block is added to the end of the ``settings.py`` that ``startproject``
  writes, as the tutorial says.

``tests/docs/test_tutorial_project.py`` follows the same page in a real project instead.
"""

from __future__ import annotations

import doctest
import functools
import re
import shlex
import sys
import tempfile
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import django
import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.urls import resolve

from headgate_django import testing
from tests.docs.markdown import DOCS, Block, blocks

TUTORIAL = DOCS / "tutorial.md"
#: Where the tutorial's project would live, for modules that use ``__file__``.
PROJECT = Path("/srv/mysite")
_DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
_LOCAL_URL = re.compile(r"http://127\.0\.0\.1:8000(?P<path>/[^\s>)?]*)(?P<query>\?[^\s>)]*)?")


@pytest.fixture
def project_modules() -> Iterator[list[str]]:
    """The tutorial's modules live in ``sys.modules`` for one test only."""
    added: list[str] = []
    yield added
    for name in reversed(added):
        sys.modules.pop(name, None)


@functools.cache
def startproject_settings() -> str:
    """The ``settings.py`` that ``django-admin startproject mysite`` writes.

    Made under another name (the test's own ``mysite`` modules would make ``startproject``
    refuse the name of an importable module), then renamed.
    """
    with tempfile.TemporaryDirectory() as target:
        call_command("startproject", "tutorial_site", target, verbosity=0)
        text = (Path(target) / "tutorial_site" / "settings.py").read_text(encoding="utf-8")
    return text.replace("tutorial_site", "mysite")


def _load_module(block: Block, added: list[str]) -> types.ModuleType:
    name = block.module_name
    assert name is not None
    parent = None
    for depth, part in enumerate(name.split(".")):
        dotted = ".".join(name.split(".")[: depth + 1])
        module = sys.modules.get(dotted)
        if module is None or dotted == name:
            module = types.ModuleType(dotted)
            module.__file__ = str(PROJECT / (dotted.replace(".", "/") + ".py"))
            if dotted != name:
                module.__path__ = []  # a package
            sys.modules[dotted] = module
            added.append(dotted)
        if parent is not None:
            setattr(parent, part, module)
        parent = module
    if name == "mysite.settings":
        exec(compile(startproject_settings(), "startproject settings", "exec"), module.__dict__)
    exec(compile(block.code, block.where, "exec"), module.__dict__)
    return module


def _run_session(block: Block, namespace: dict[str, object]) -> None:
    test = doctest.DocTestParser().get_doctest(
        block.code, namespace, block.where, str(block.path), block.line
    )
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=_DOCTEST_FLAGS)
    runner.run(test, out=report.append, clear_globs=False)
    namespace.update(test.globs)  # a DocTest works on a copy; the session carries on
    assert runner.failures == 0, f"{block.where}: shell session failed\n" + "".join(report)


def _check_commands(block: Block) -> int:
    """Parse every ``python manage.py <command> …`` line with that command's parser."""
    checked = 0
    for line in block.code.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] != ["python", "manage.py"]:
            continue
        name, args = words[2], words[3:]
        commands = get_commands()
        assert name in commands, f"{block.where}: no management command {name!r}"
        command = load_command_class(commands[name], name)
        command.create_parser("manage.py", name).parse_args(args)
        checked += 1
    return checked


def _run_tutorial(added: list[str]) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "tutorial_shell"}
    found = blocks(TUTORIAL)
    assert found, "the tutorial has no code blocks"
    for block in found:
        if block.lang == "python":
            if block.module_name is not None:
                _load_module(block, added)
            else:
                exec(compile(block.code, block.where, "exec"), namespace)
        elif block.lang == "pycon":
            _run_session(block, namespace)
        elif block.lang == "sh":
            _check_commands(block)
            if "manage.py runworkers" in block.code:
                testing.run_jobs()
        else:
            raise AssertionError(f"{block.where}: no rule to test a {block.lang!r} block")
    return namespace


@pytest.fixture
def tutorial_settings(settings):
    # The tutorial's outputs assume no coordinator wakes up by the clock while the shell
    # session runs; a long poll keeps that true on a slow machine. Emails are printed, as
    # the page's settings have it.
    settings.HEADGATE = {"COORDINATOR_POLL": timedelta(minutes=5)}
    console = "django.core.mail.backends.console.EmailBackend"
    if django.VERSION >= (6, 1):  # EMAIL_BACKEND is deprecated there (warnings are errors)
        settings.MAILERS = {"default": {"BACKEND": console}}
    else:
        settings.EMAIL_BACKEND = console
    return settings


def test_every_block_of_the_tutorial_runs(db, tutorial_settings, project_modules, capsys):
    _run_tutorial(project_modules)
    # Ada's email went out from the worker of step 5 (run here in-process); Grace's from
    # the shell session of step 8, which shows it.
    assert "To: ada@example.com" in capsys.readouterr().out


def test_the_console_pages_the_tutorial_names_render(
    db, tutorial_settings, admin_client, project_modules
):
    _run_tutorial(project_modules)
    urls = sys.modules["mysite.urls"]
    found = list(_LOCAL_URL.finditer(TUTORIAL.read_text(encoding="utf-8")))
    assert len(found) >= 3, "the tutorial should point at the console pages"
    for match in found:
        resolve(match["path"], urlconf=urls)  # Resolver404 if the page moved
        page = admin_client.get(match["path"] + (match["query"] or ""))
        assert page.status_code == 200, f"{match[0]} answered {page.status_code}"
    queues = admin_client.get("/admin/headgate_django/job/queues/")
    assert b"headgate-workflow" in queues.content and b"default" in queues.content
    jobs = admin_client.get("/admin/headgate_django/job/", {"workflow_id": "onboarding:grace"})
    assert b"onboarding:grace:approval" in jobs.content


def test_the_tutorial_settings_pass_the_system_checks(settings, monkeypatch):
    from headgate_django import checks

    block = next(b for b in blocks(TUTORIAL) if b.module_name == "mysite.settings")
    namespace: dict[str, object] = {"__file__": str(PROJECT / "mysite/settings.py")}
    exec(compile(startproject_settings(), "startproject settings", "exec"), namespace)
    exec(compile(block.code, block.where, "exec"), namespace)
    assert {"headgate_django", "rest_framework", "django_filters", "channels"} <= set(
        namespace["INSTALLED_APPS"]  # type: ignore[arg-type]
    )
    settings.HEADGATE = namespace["HEADGATE"]
    tutorial = types.SimpleNamespace(USE_TZ=namespace["USE_TZ"], DATABASES=namespace["DATABASES"])
    monkeypatch.setattr(checks, "settings", tutorial)
    assert checks.check_settings() == []


def test_sh_blocks_name_real_commands():
    checked = sum(_check_commands(b) for b in blocks(TUTORIAL) if b.lang == "sh")
    assert checked >= 5  # startapp, migrate, runworkers, createsuperuser, runserver

"""The app finds its own templates and static files from wherever it is installed, with
nothing in the project's settings: Django's app-directories template loader and the
staticfiles app finder look inside the package, where both folders live. The test
settings (like the sample project's) set no template ``DIRS`` and no
``STATICFILES_DIRS``, so every console test runs on that alone; tests/dist checks the
built wheel and an editable install in a fresh virtualenv."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.template.loader import get_template

import headgate_django

PACKAGE = Path(headgate_django.__file__).resolve().parent
ROOT = PACKAGE.parent


def test_the_settings_point_nowhere_else():
    assert all(not engine.get("DIRS") for engine in settings.TEMPLATES)
    assert not getattr(settings, "STATICFILES_DIRS", None)


@pytest.mark.parametrize(
    "name",
    [
        "headgate_django/admin/index.html",
        "admin/headgate_django/app_index.html",
        "headgate_django/console/queues.html",
        "headgate_django/console/workflow.html",
    ],
)
def test_templates_load_from_the_package(name: str):
    origin = Path(get_template(name).origin.name).resolve()
    assert origin.is_relative_to(PACKAGE / "templates"), origin


@pytest.mark.parametrize(
    "name", ["headgate_django/console/console.css", "headgate_django/console/graph.js"]
)
def test_static_files_are_found_in_the_package(name: str):
    found = finders.find(name)
    assert found is not None, name
    assert Path(found).resolve().is_relative_to(PACKAGE / "static"), found


def test_the_top_level_folders_are_views_of_the_package_ones():
    """The repository shows templates/ and static/ at its top level (the design card), as
    links into the package: one copy, so an edit through either path is the same edit."""
    for name in ("templates", "static"):
        top = ROOT / name
        if top.exists():  # a checkout; an installed package has no top level
            assert top.is_symlink() and top.resolve() == (PACKAGE / name).resolve(), top

"""The app finds its templates and static files however it is installed: build the sdist
and, from it, the wheel (what ``python -m build`` does), install the wheel into a clean
virtualenv, render the admin and a console page and serve a static file through the
staticfiles finders; then turn the same virtualenv into an editable install of this
checkout (``pip install -e``, dependencies already there) and do it again. The project's
settings name no template ``DIRS`` and no ``STATICFILES_DIRS``.

Slow (it builds a wheel and installs dependencies), so it runs only when
HEADGATE_TEST_DIST=1 — the ``dist`` tox environment sets it, and CI runs that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("HEADGATE_TEST_DIST") != "1",
    reason="set HEADGATE_TEST_DIST=1 to build and test the wheel",
)

SCRIPT = textwrap.dedent(
    """
    import pathlib, sys
    import django
    from django.conf import settings

    here = pathlib.Path(sys.argv[1])
    package_home = pathlib.Path(sys.argv[2]).resolve()  # where headgate_django must come from
    settings.configure(
        DEBUG=False,
        SECRET_KEY="dist-test",
        ALLOWED_HOSTS=["testserver"],
        USE_TZ=True,
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[
            "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
            "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
            "rest_framework", "django_filters", "channels", "headgate_django",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[{
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {"context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]},
        }],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(here / "db.sqlite3")}},
        STATIC_URL="static/",
    )
    django.setup()
    from django.contrib import admin
    from django.contrib.staticfiles.views import serve
    from django.urls import path, re_path
    urlpatterns = [
        path("admin/", admin.site.urls),
        re_path(r"^static/(?P<path>.*)$", serve, {"insecure": True}),
    ]

    import headgate_django
    def inside(p):
        return pathlib.Path(p).resolve().is_relative_to(package_home)
    assert inside(headgate_django.__file__), headgate_django.__file__
    from django.contrib.staticfiles import finders
    from django.core.management import call_command
    from django.template.loader import get_template
    template = get_template("headgate_django/console/queues.html")
    assert inside(template.origin.name), template.origin.name
    css = finders.find("headgate_django/console/console.css")
    assert css is not None and inside(css), css
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User
    User.objects.create_superuser("admin", "a@example.com", "pw")
    from django.test import Client
    client = Client()
    client.login(username="admin", password="pw")
    for url in ["/admin/", "/admin/headgate_django/job/", "/admin/headgate_django/job/queues/"]:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    response = client.get("/static/headgate_django/console/console.css")
    assert response.status_code == 200, response.status_code
    assert b"".join(response.streaming_content), "empty stylesheet"
    print("RENDERED OK")
    """
)


def test_wheel_and_editable_installs_render(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("headgate_django-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, str(wheel)], check=True)
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    _render(python, tmp_path, Path(site_packages))
    # The same virtualenv, now an editable install of this checkout: nothing is copied,
    # so the package must find the folders inside itself.
    subprocess.run([*pip, "--no-deps", "-e", str(ROOT)], check=True)
    _render(python, tmp_path, ROOT / "headgate_django")


def _render(python: Path, tmp_path: Path, package_home: Path) -> None:
    script = tmp_path / "render.py"
    script.write_text(SCRIPT)
    (tmp_path / "db.sqlite3").unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    result = subprocess.run(
        [str(python), str(script), str(tmp_path), str(package_home)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RENDERED OK" in result.stdout

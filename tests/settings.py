"""Test settings: the database comes from DATABASE_URL (SQLite in a temp file by default)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sampleproject.dburl import database_from_env

SECRET_KEY = "tests"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "channels",
    "headgate_django",
    "tests.app.apps.TestAppConfig",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent.parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_sqlite_dir = Path(os.environ.get("HEADGATE_TEST_DIR", tempfile.gettempdir()))
DATABASES = {"default": database_from_env(_sqlite_dir / "headgate-tests.sqlite3")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so worker subprocesses and threads share the test database.
    DATABASES["default"]["TEST"] = {
        "NAME": str(_sqlite_dir / f"headgate-test-{os.getpid()}.sqlite3")
    }
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
HEADGATE: dict[str, object] = {}
SILENCED_SYSTEM_CHECKS = ["models.W037"]

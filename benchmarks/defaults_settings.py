"""Settings as a new user writes them: ``django-admin startproject`` plus the README's install.

``benchmarks/jobs.py --defaults`` runs every measurement with these, so the figures are the
ones a project gets before anyone tunes it. What this file changes from startproject's
template, and why: ``DEBUG`` is off, as in every deployment (Django keeps a log of every
query while it is on); ``DATABASES`` is the plain dictionary Django's documentation shows
for PostgreSQL, built from ``DATABASE_URL``'s parts with no ``OPTIONS`` and no
``CONN_MAX_AGE``; ``INSTALLED_APPS`` gains the README's four apps and the benchmark's own
no-op handlers. There is no ``LOGGING`` and no ``HEADGATE``: every setting is its default.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-insecure-benchmark-defaults"
DEBUG = False
ALLOWED_HOSTS: list[str] = []

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
    "benchmarks.benchapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "sampleproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database(url: str) -> dict[str, str]:
    """The five keys a user types, read off ``DATABASE_URL`` (PostgreSQL, MariaDB or SQLite)."""
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": unquote(parts.path[1:])}
    mysql = parts.scheme.startswith(("mysql", "mariadb"))
    return {
        "ENGINE": "django.db.backends.mysql" if mysql else "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


# startproject's own SQLite file when no DATABASE_URL is given.
DATABASES = {
    "default": _database(os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR}/db.sqlite3"))
}

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

"""Settings of the sample project: SQLite by default, any database through DATABASE_URL."""

from __future__ import annotations

import os
from pathlib import Path

from sampleproject.dburl import database_from_env

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "sample-project-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    # First, so that its runserver (Daphne, ASGI) replaces Django's; Daphne is not an app
    # here because its app module would import Twisted in every command (see the command).
    "sampleproject.demo.apps.DemoConfig",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "channels",
    "headgate_django",
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
ASGI_APPLICATION = "sampleproject.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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

DATABASES = {"default": database_from_env(BASE_DIR / "db.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
if os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A read timeout above channels-redis's 5 s BZPOPMIN: see
            # docs/how-to/deployment.md.
            "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": 15}]},
        }
    }

STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"

HEADGATE: dict[str, object] = {}

# The control API at /api/v1/ (docs/api.md): token and session authentication, plus HTTP
# Basic in DEBUG so the guide's curl examples run with credentials in the URL, e.g.
# HEADGATE_URL=http://admin:headgate-demo@127.0.0.1:8000 (never enable Basic over plain HTTP
# in production).
# `manage.py rundemo` serves the API a second time on a loopback port whose callers are the
# demo operator without credentials (sampleproject/auth.py), so the workflow guide's curl
# commands run as written. An explicit opt-in, which `make demo` gives
# (HEADGATE_DEMO_OPERATOR=1): it works only with DEBUG on, and `manage.py check` refuses it
# with DEBUG off or under --deploy (headgate.E007). Unset, that port does not exist.
HEADGATE_DEMO_OPERATOR = os.environ.get("HEADGATE_DEMO_OPERATOR") == "1"
DEMO_OPERATOR_PORT = (
    int(os.environ["DEMO_OPERATOR_PORT"])
    if HEADGATE_DEMO_OPERATOR and os.environ.get("DEMO_OPERATOR_PORT")
    else None
)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        *(["rest_framework.authentication.BasicAuthentication"] if DEBUG else []),
        *(["sampleproject.auth.OperatorPortAuthentication"] if DEMO_OPERATOR_PORT else []),
    ],
}

# No LOGGING: `runworkers` prints its own start, status and failure lines with Django's
# default logging (see docs/reference/cli.md to route them yourself).

"""Test settings: the database comes from DATABASE_URL (SQLite in a temp file by default)."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from sampleproject.dburl import database_from_env, database_from_url

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
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
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
    "headgate_django.replicas.ReplicaReadsMiddleware",  # inert without READ_REPLICA
]
ROOT_URLCONF = "tests.urls"
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
STATIC_URL = "static/"
# The control API (tests/api): token first, so an anonymous call gets 401 + WWW-Authenticate.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ]
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_sqlite_dir = Path(os.environ.get("HEADGATE_TEST_DIR", tempfile.gettempdir()))
DATABASES = {"default": database_from_env(_sqlite_dir / "headgate-tests.sqlite3")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file, not :memory:, so worker subprocesses and threads share the test database.
    DATABASES["default"]["TEST"] = {
        "NAME": str(_sqlite_dir / f"headgate-test-{os.getpid()}.sqlite3")
    }
    # A second database standing in for a read replica (tests/api/test_replicas.py): a
    # separate file, so a read that reaches it is told apart from one of the primary.
    DATABASES["replica"] = {
        **DATABASES["default"],
        "TEST": {"NAME": str(_sqlite_dir / f"headgate-test-replica-{os.getpid()}.sqlite3")},
    }
# Inert unless HEADGATE["READ_REPLICA"] is set (headgate_django.replicas).
DATABASE_ROUTERS = ["headgate_django.replicas.ReplicaRouter"]
CHANNEL_LAYERS: dict[str, Any] = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# The console's Redis test runs worker subprocesses that must publish through the same
# channel layer as the test (see tests/console/test_consumers.py).
if os.environ.get("HEADGATE_TEST_REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # Reads may block longer than channels-redis's 5 s BZPOPMIN (see
                # docs/how-to/deployment.md).
                "hosts": [{"address": os.environ["HEADGATE_TEST_REDIS_URL"], "socket_timeout": 15}],
                "prefix": os.environ.get("HEADGATE_TEST_REDIS_PREFIX", "asgi"),
            },
        }
    }
HEADGATE: dict[str, object] = {}
# Behind a transaction-pooling proxy (the PgBouncer leg, tests/pooler/run_pgbouncer.py),
# worker subprocesses get HEADGATE_TEST_DIRECT_URL, the same test database reached
# directly, and LISTEN through it (HEADGATE["LISTEN_USING"]) as the deployment docs advise.
if os.environ.get("HEADGATE_TEST_DIRECT_URL"):
    DATABASES["direct"] = database_from_url(os.environ["HEADGATE_TEST_DIRECT_URL"])
    HEADGATE["LISTEN_USING"] = "direct"

# Worker subprocesses started by the integration tests take extra HEADGATE settings from
# HEADGATE_TEST_SETTINGS_JSON, a JSON object of HEADGATE keys, e.g.
# '{"SHUTDOWN_TIMEOUT": 0.5, "CRASH_BACKOFF": 0.1}'. A number given for a duration setting
# (one whose default is a timedelta, or RENEW_INTERVAL) is a number of seconds.
_extra = os.environ.get("HEADGATE_TEST_SETTINGS_JSON")
if _extra:
    from headgate_django.conf import DEFAULTS as _HEADGATE_DEFAULTS

    for _key, _value in json.loads(_extra).items():
        _duration = isinstance(_HEADGATE_DEFAULTS.get(_key), timedelta)
        if (_duration or _key == "RENEW_INTERVAL") and isinstance(_value, int | float):
            _value = timedelta(seconds=_value)
        HEADGATE[_key] = _value

# Worker subprocesses log headgate_django at HEADGATE_TEST_LOG_LEVEL (set by the
# ``worker_env`` fixture) to stderr, so tests can read what a worker reported.
if os.environ.get("HEADGATE_TEST_LOG_LEVEL"):
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "worker": {"format": "%(asctime)s pid=%(process)d %(levelname)s %(name)s %(message)s"}
        },
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "worker"}},
        "loggers": {
            "headgate_django": {
                "handlers": ["stderr"],
                "level": os.environ["HEADGATE_TEST_LOG_LEVEL"],
            }
        },
    }

import django  # noqa: E402

if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport of django.tasks
if django.VERSION >= (6, 1):
    # Django 6.1 deprecates the implicit default mailer (warnings are errors here).
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

TASKS = {
    "default": {
        "BACKEND": "headgate_django.tasks.HeadgateBackend",
        "QUEUES": ["default", "emails"],
    },
    # Django's run-once semantics for every task of this alias (tests/tasks/test_contract.py).
    "once": {
        "BACKEND": "headgate_django.tasks.HeadgateBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 1},
    },
}

"""``DATABASE_URL`` → a Django ``DATABASES`` entry, with the options headgate needs.

SQLite gets WAL, ``BEGIN IMMEDIATE`` transactions and a busy timeout so several worker
processes share one file without "database is locked" surprises. PostgreSQL and MariaDB get
connect timeouts, and MariaDB read and write timeouts, so that a call on a connection the
server will never answer (a server restarting under it) fails and is retried instead of
blocking a worker thread for good. Query parameters in the URL override each of these and
pass through as ``OPTIONS``: ``?prepare_threshold=5`` or ``=none`` sets psycopg's prepared
statements for every query (headgate's store prepares its own hot statements without it),
and ``?disable_server_side_cursors=true`` marks an alias behind a transaction pooler.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_ENGINES = {
    "postgres": "django.db.backends.postgresql",
    "postgresql": "django.db.backends.postgresql",
    "mysql": "django.db.backends.mysql",
    "mariadb": "django.db.backends.mysql",
    "sqlite": "django.db.backends.sqlite3",
}

SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def database_from_url(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme not in _ENGINES:
        raise ValueError(f"unsupported DATABASE_URL scheme {parts.scheme!r}")
    if scheme == "sqlite":
        # sqlite:///relative.db or sqlite:////absolute/path.db
        name = unquote(parts.path[1:]) if parts.path.startswith("/") else unquote(parts.path)
        return {"ENGINE": _ENGINES[scheme], "NAME": name, "OPTIONS": dict(SQLITE_OPTIONS)}
    options: dict[str, Any] = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    extra: dict[str, Any] = {}
    if scheme in ("mysql", "mariadb"):
        options.setdefault("charset", "utf8mb4")
        options.setdefault("isolation_level", "read committed")
        # Above InnoDB's 50 s lock wait, so a timeout here means the server is gone.
        for option, seconds in (
            ("connect_timeout", 10),
            ("read_timeout", 120),
            ("write_timeout", 120),
        ):
            options[option] = int(options.get(option, seconds))
    else:
        options["connect_timeout"] = int(options.get("connect_timeout", 10))
        if "prepare_threshold" in options:
            threshold = str(options["prepare_threshold"])
            options["prepare_threshold"] = None if threshold.lower() == "none" else int(threshold)
        if str(options.pop("disable_server_side_cursors", "")).lower() in ("1", "true", "yes"):
            extra["DISABLE_SERVER_SIDE_CURSORS"] = True  # a transaction-pooling proxy
    return {
        **extra,
        "ENGINE": _ENGINES[scheme],
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


def database_from_env(default_sqlite: Path) -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        return database_from_url(url)
    return {
        "ENGINE": _ENGINES["sqlite"],
        "NAME": str(default_sqlite),
        "OPTIONS": dict(SQLITE_OPTIONS),
    }

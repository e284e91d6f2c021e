"""``DATABASE_URL`` parsing of the sample project (and of the test settings)."""

from __future__ import annotations

import pytest

from sampleproject.dburl import database_from_url


def test_postgres_gets_a_connect_timeout_and_keeps_url_options() -> None:
    db = database_from_url("postgresql://u:p%40ss@db.example:5433/app?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "app",
        "u",
        "p@ss",
        "db.example",
        "5433",
    )
    assert db["OPTIONS"] == {"sslmode": "require", "connect_timeout": 10}


def test_postgres_prepared_statements_can_be_tuned_or_turned_off() -> None:
    """Left alone by default (the store prepares its own statements); set when asked."""
    opts = database_from_url("postgresql://u@h/app?prepare_threshold=0")["OPTIONS"]
    assert opts["prepare_threshold"] == 0
    opts = database_from_url("postgresql://u@h/app?prepare_threshold=None")["OPTIONS"]
    assert opts["prepare_threshold"] is None


def test_mariadb_gets_timeouts_that_the_url_can_override() -> None:
    db = database_from_url("mysql://root@127.0.0.1:3306/app?read_timeout=300")
    assert db["OPTIONS"] == {
        "charset": "utf8mb4",
        "isolation_level": "read committed",
        "connect_timeout": 10,
        "read_timeout": 300,
        "write_timeout": 120,
    }


def test_sqlite_paths_and_unknown_schemes() -> None:
    assert database_from_url("sqlite:////tmp/x.db")["NAME"] == "/tmp/x.db"
    with pytest.raises(ValueError, match="unsupported DATABASE_URL scheme"):
        database_from_url("oracle://x/y")

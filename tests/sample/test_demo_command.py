"""``manage.py demo`` (and ``rundemo --seed``, which runs it first) on a database that was
never migrated: the reason and the way out, not a traceback from the first query."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import manage


def test_demo_on_an_unmigrated_database_says_to_migrate(tmp_path: Path) -> None:
    done = manage(
        "demo", settings="sampleproject.settings", database_url=f"sqlite:///{tmp_path}/db.sqlite3"
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        "CommandError: the database is not migrated: run `manage.py migrate` first"
    )


@pytest.mark.parametrize("addr", ["127.0.0.1:99999", "127.0.0.1:0", ":8000"])
def test_rundemo_refuses_an_address_runserver_cannot_serve_before_it_starts(
    tmp_path: Path, addr: str
) -> None:
    """`make demo DEMO_ADDR=...` with a port out of range (or one runserver cannot take)
    is refused with the reason, not a traceback or a server that never listens."""
    done = manage(
        "rundemo",
        "--addr",
        addr,
        "--operator-addr",
        "",
        settings="sampleproject.settings",
        database_url=f"sqlite:///{tmp_path}/db.sqlite3",
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"CommandError: {addr!r} is not a host:port address with a port from 1 to 65535"
    )

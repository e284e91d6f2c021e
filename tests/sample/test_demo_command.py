"""``manage.py demo`` (and ``rundemo --seed``, which runs it first) on a database that was
never migrated: the reason and the way out, not a traceback from the first query."""

from __future__ import annotations

from pathlib import Path

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

"""``runworkers`` refuses a database that lacks headgate's tables or migrations, and says
what to run; it used to retry the failing statements forever, even with ``--burst``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headgate_django.store import schema
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


def migrate(env: dict[str, str], url: str, *target: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", *target, "-v0"],
        env={**env, "DATABASE_URL": url},
        cwd=ROOT,
        check=True,
    )


def test_a_database_never_migrated_is_refused_with_the_fix(start_worker, tmp_path):
    worker = start_worker("--burst", env={"DATABASE_URL": sqlite_url(tmp_path / "new.sqlite3")})
    assert worker.proc.wait(timeout=60) == 1, worker.output()
    out = worker.output()
    assert "database 'default' has no table headgate_" in out
    assert "headgate_job" in out
    assert "run `manage.py migrate` first" in out


def test_a_database_behind_this_release_is_refused_until_migrated(
    start_worker, worker_env, tmp_path
):
    url = sqlite_url(tmp_path / "old.sqlite3")
    *earlier, latest = schema.shipped_migrations()
    migrate(worker_env, url, "headgate_django", earlier[-1])
    worker = start_worker("--burst", env={"DATABASE_URL": url})
    assert worker.proc.wait(timeout=60) == 1, worker.output()
    assert (
        f"database 'default' lacks headgate migrations {latest}: run `manage.py migrate` first"
        in worker.output()
    )
    migrate(worker_env, url)
    worker = start_worker("--burst", env={"DATABASE_URL": url})
    assert worker.proc.wait(timeout=60) == 0, worker.output()


@pytest.mark.django_db
def test_the_test_database_is_complete_however_it_was_built():
    """Migrated, or built from the models with ``--nomigrations``: nothing is missing."""
    assert schema.schema_problem() is None


def test_shipped_migrations_are_the_migration_modules_in_order():
    names = schema.shipped_migrations()
    assert names[0] == "0001_initial"
    assert names == sorted(names)
    assert all(name[:4].isdigit() for name in names)
    assert "__init__" not in names

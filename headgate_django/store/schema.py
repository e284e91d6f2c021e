"""Whether a database holds the tables and migrations this release of headgate needs.

A worker pointed at a database that was never migrated, or last migrated by an older
release, fails on its first statement; left to its retry loop it would log the same
error every few seconds and never exit, even with ``--burst``. ``runworkers`` asks here
first and refuses to start, saying what is missing.
"""

from __future__ import annotations

import pkgutil

from django.apps import apps
from django.db import connections
from django.db.migrations.recorder import MigrationRecorder

APP_LABEL = "headgate_django"


def schema_problem(using: str = "default") -> str | None:
    """What keeps headgate from working on database ``using``, in words; None if nothing.

    Migrations first, for a database whose history records any of headgate's: every
    migration this release ships must be applied (a pending one is the precise fix even
    when the tables it creates are what is missing). Then tables: every headgate table
    must exist. A database with the tables and no record of headgate's migrations was
    built from the models (a test run with ``--nomigrations``) and is taken as it is.
    """
    conn = connections[using]
    # One listing of the tables answers both questions; the recorder's ``has_table()``
    # would list them once more, a round trip in every worker's start.
    with conn.cursor() as cursor:
        existing = set(conn.introspection.table_names(cursor))
    recorder = MigrationRecorder(conn)
    if recorder.Migration._meta.db_table in existing:
        applied = set(recorder.migration_qs.filter(app=APP_LABEL).values_list("name", flat=True))
        pending = [name for name in shipped_migrations() if name not in applied]
        if applied and pending:
            return f"database {using!r} lacks headgate migrations {', '.join(pending)}"
    config = apps.get_app_config(APP_LABEL)
    missing = sorted(
        m._meta.db_table
        for m in config.get_models()
        if m._meta.managed and m._meta.db_table not in existing
    )
    if missing:
        return f"database {using!r} has no table {', '.join(missing)}"
    return None


def shipped_migrations() -> list[str]:
    """The names of the migrations in this release, in order."""
    from headgate_django import migrations

    return sorted(m.name for m in pkgutil.iter_modules(migrations.__path__) if m.name[0].isdigit())

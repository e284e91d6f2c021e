"""Only ``headgate_django/store/`` talks to the database (DESIGN.md §2).

An AST scan of every other module of the package for the ways Django code reaches a
database: a model manager (``.objects``), a row lock, instance writes, SQL through a
cursor or the ORM's raw escapes, and transaction control. A line the scan flags is either
moved behind a store verb or listed in :data:`ALLOWED` with the reason it cannot be.
Opening and closing connections (the worker's lifecycle) is not database talk and is not
flagged; the read-only querysets that Django's own ``ModelAdmin`` builds are not either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "headgate_django"

#: Schema and history: the places that define what the store reads and writes.
EXEMPT = ("store/", "migrations/", "models.py")

#: Attribute names whose use means a query, a lock, a write or raw SQL.
BANNED_ATTRIBUTES = {
    "objects": "a model manager",
    "_default_manager": "a model manager",
    "_base_manager": "a model manager",
    "select_for_update": "a row lock",
    "raw": "raw SQL",
    "extra": "raw SQL",
}
#: Method names whose call means a write or SQL (attribute access alone is fine: a
#: ``cursor`` attribute of a page, a plan's ``delete`` list).
BANNED_CALLS = {
    "save": "an instance write",
    "delete": "an instance write",
    "refresh_from_db": "a query",
    "get_or_create": "a write",
    "update_or_create": "a write",
    "bulk_create": "a write",
    "bulk_update": "a write",
    "cursor": "SQL through a cursor",
    "execute": "SQL",
    "executemany": "SQL",
}
#: Names from ``django.db`` (and its submodules) that no module outside the store imports.
BANNED_IMPORTS = {"transaction": "transaction control", "RawSQL": "raw SQL"}

#: (module, what) → why it stays. Each entry is a boundary the store cannot own.
ALLOWED: dict[tuple[str, str], str] = {
    ("api/views/jobs.py", "objects"): (
        "DRF list and detail views hand django-filter and the cursor paginator a lazy "
        "QuerySet; it only reads, and every job change goes through a store verb"
    ),
    ("api/views/queues.py", "objects"): (
        "the quarantine list view's lazy QuerySet for DRF filtering and pagination; read-only"
    ),
    ("api/idempotency.py", "transaction"): (
        "an API mutation and its Idempotency-Key record commit together or not at all (and "
        "roll back on an error response); the writes inside are store verbs"
    ),
    ("console/publish.py", "transaction"): (
        "on_commit: live pages hear of a change only once it is committed; no SQL"
    ),
    ("workflows/grafts.py", "transaction"): (
        "the coordinator lock (workflow_coordinator_lock), the checks and the graft's insert "
        "share one transaction, so the checks still hold at the commit"
    ),
    ("workflows/retry.py", "transaction"): (
        "a failed-subgraph retry's repairs, its receipt and the coordinator's reopening are "
        "several store verbs that must commit together"
    ),
    ("worker/notify.py", "execute"): (
        "the wake-up threads read no table: LISTEN on their own psycopg connection, and "
        "SQLite's PRAGMA data_version counter 200 times a second without Django's cursor"
    ),
}


def _violations(path: Path) -> list[tuple[int, str, str]]:
    """(line, what, why banned) for every flagged construct of one module."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in BANNED_ATTRIBUTES:
            found.append((node.lineno, node.attr, BANNED_ATTRIBUTES[node.attr]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in BANNED_CALLS
        ):
            found.append((node.lineno, node.func.attr, BANNED_CALLS[node.func.attr]))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django.db"):
            for alias in node.names:
                if alias.name in BANNED_IMPORTS:
                    found.append((node.lineno, alias.name, BANNED_IMPORTS[alias.name]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "django.db.transaction":
                    found.append((node.lineno, "transaction", "transaction control"))
    return found


def _modules() -> list[Path]:
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not p.relative_to(PACKAGE).as_posix().startswith(EXEMPT)
    ]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_only_the_store_talks_to_the_database(path: Path) -> None:
    module = path.relative_to(PACKAGE).as_posix()
    flagged = [
        f"{module}:{line}: {what} ({why}) — move it behind a store verb"
        for line, what, why in _violations(path)
        if (module, what) not in ALLOWED
    ]
    assert not flagged, "\n".join(flagged)


def test_every_allowance_is_still_needed() -> None:
    """An allowance whose code has moved into the store goes too, so the list stays exact."""
    used = {
        (p.relative_to(PACKAGE).as_posix(), what)
        for p in _modules()
        for _, what, _ in _violations(p)
    }
    assert set(ALLOWED) <= used, sorted(set(ALLOWED) - used)


def test_the_scan_sees_each_kind_of_database_talk(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from django.db import transaction\n"
        "Job.objects.select_for_update().filter(pk=1)\n"
        "job.save()\n"
        "connection.cursor().execute('SELECT 1')\n"
        "page.cursor\n"
        "plan.delete\n"
    )
    assert sorted(what for _, what, _ in _violations(sample)) == [
        "cursor",
        "execute",
        "objects",
        "save",
        "select_for_update",
        "transaction",
    ]

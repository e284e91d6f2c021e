"""Names a case-insensitive collation would merge: refused before a policy is written.

MySQL/MariaDB's usual collations (``utf8mb4_general_ci``, ``utf8mb4_0900_ai_ci``) compare
text without case, so a lookup of ``mail`` finds the stored ``Mail``: an upsert in the new
name would silently change the other row, while everything that matches names in Python
(the worker's policy map, the claim's rate classes) still tells them apart. A clear refusal
is the one behaviour that agrees with itself; PostgreSQL and SQLite never get here.
"""

from __future__ import annotations

from django.db import models

from headgate_django.exceptions import DefinitionError
from headgate_django.store import vendor as v


def stored_otherwise(model: type[models.Model], field: str, name: str, using: str) -> str | None:
    """The stored ``field`` value that equals ``name`` only under the column's collation."""
    if v.connection_for(using).vendor != "mysql":
        return None
    stored = model._default_manager.using(using).filter(**{field: name})
    return next((s for s in stored.values_list(field, flat=True) if s != name), None)


def refuse_case_clash(
    model: type[models.Model],
    field: str,
    name: str,
    what: str,
    using: str,
    error: type[DefinitionError] = DefinitionError,
) -> None:
    """Raise ``error`` when ``name`` would be stored as another ``what``."""
    other = stored_otherwise(model, field, name, using)
    if other is not None:
        raise error(
            f"{what} {name!r} cannot be stored beside {what} {other!r}: the database "
            f"compares {what} names without case (a case-insensitive collation), so the "
            "two would be one; choose a name that differs by more than case",
            name=name,
            existing=other,
        )

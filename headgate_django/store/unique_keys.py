"""Which live jobs hold which unique keys: the one query for it on every database.

A unique key belongs to a job while it is live (``LIVE_JOB_STATES``). PostgreSQL and SQLite
enforce that with a partial unique index on ``unique_key`` for live rows, which this query
reads by repeating its condition. MySQL/MariaDB have no partial indexes: there a stored
generated column ``unique_live`` (the key while the job is live, else NULL) carries a
plain unique index (migrations 0009 and 0011), and the query reads that column instead.
The model leaves that column out, since the other databases do not have it.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.backends.base.base import BaseDatabaseWrapper

from headgate_django.models import LIVE_JOB_STATES
from headgate_django.store import vendor as v

# The condition of the model's ``headgate_job_unique_key_live`` constraint, spelled the same
# way, so that PostgreSQL and SQLite both see that the partial index covers the query.
_LIVE = ", ".join(f"'{state}'" for state in LIVE_JOB_STATES)


def live_holders(conn: BaseDatabaseWrapper, keys: Sequence[str]) -> list[tuple[str, str]]:
    """``(job id, unique key)`` of each live job holding one of ``keys``."""
    if not keys:
        return []
    marks = v.placeholders(len(keys))
    if conn.vendor == "mysql":
        sql = f"SELECT id, unique_live FROM headgate_job WHERE unique_live IN ({marks})"
    else:
        sql = (
            f"SELECT id, unique_key FROM headgate_job WHERE unique_key IN ({marks}) "
            f"AND unique_key IS NOT NULL AND state IN ({_LIVE})"
        )
    with conn.cursor() as cursor:
        cursor.execute(sql, list(keys))
        return [(row[0], row[1]) for row in cursor.fetchall()]

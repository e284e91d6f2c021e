"""Leases on singleton duties, compare-and-set on the store clock.

Any number of worker processes on any number of hosts may call :func:`duty_acquire`; at
most one holds a duty until its lease lapses, so maintenance never runs twice at once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction

from headgate_django.store import vendor as v


def duty_acquire(name: str, *, holder: str, ttl: timedelta, using: str = "default") -> bool:
    """Take or renew the duty lease; ``True`` when ``holder`` now holds it."""
    conn = v.connection_for(using)
    ttl_ms = int(ttl.total_seconds() * 1000)
    with transaction.atomic(using=using), conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE headgate_duty SET holder = %s, lease_expires_at = {v.plus_ms(conn)}, "
            "fence = fence + 1 WHERE name = %s AND (holder = %s OR lease_expires_at IS NULL "
            f"OR lease_expires_at < {v.now(conn)})",
            [holder, ttl_ms, name, holder],
        )
        if cursor.rowcount == 1:
            return True
        cursor.execute("SELECT 1 FROM headgate_duty WHERE name = %s", [name])
        if cursor.fetchone() is not None:
            return False
        try:
            with transaction.atomic(using=using):
                cursor.execute(
                    "INSERT INTO headgate_duty (name, holder, lease_expires_at, fence, last_result) "
                    f"VALUES (%s, %s, {v.plus_ms(conn)}, 1, %s)",
                    [name, holder, ttl_ms, "{}"],
                )
        except IntegrityError:
            return False
        return True


def duty_record(name: str, *, holder: str, result: dict[str, Any], using: str = "default") -> None:
    """Note when the duty last ran and what it did (shown in the admin)."""
    import json

    conn = v.connection_for(using)
    with conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE headgate_duty SET last_run_at = {v.now(conn)}, last_result = %s "
            "WHERE name = %s AND holder = %s",
            [json.dumps(result), name, holder],
        )


def duty_release(*names: str, holder: str, using: str = "default") -> None:
    """Give up the named duties' leases where ``holder`` holds them; with no name, every
    duty lease it holds (a stopping worker: one statement and one commit for all)."""
    conn = v.connection_for(using)
    only = f" AND name IN ({v.placeholders(len(names))})" if names else ""
    with conn.cursor() as cursor:
        cursor.execute(
            "UPDATE headgate_duty SET holder = '', lease_expires_at = NULL "
            f"WHERE holder = %s{only}",
            [holder, *names],
        )
